"""agentrl_jax.precision: "auto" is bf16 only where bf16 products run natively."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest

from agentrl_jax import precision


@pytest.mark.parametrize("flags,expected", [
    ({"avx2", "avx512f", "avx512_bf16"}, "bfloat16"),   # AMD Zen 4
    ({"avx2", "avx512f", "amx_tile", "amx_bf16"}, "bfloat16"),   # Intel Sapphire Rapids
    ({"avx2", "fma"}, None),   # AMD Zen 3: bf16 emulated, slower than fp32
])
def test_auto_on_a_cpu_follows_its_bf16_instructions(monkeypatch, flags, expected):
    monkeypatch.setattr(precision, "cpu_flags", lambda: frozenset(flags))
    monkeypatch.setattr(jax, "default_backend", lambda: "cpu")
    assert precision.resolve("auto") == expected


def test_auto_on_an_accelerator_is_bf16_and_other_values_pass_through(monkeypatch):
    monkeypatch.setattr(precision, "cpu_flags", lambda: frozenset())
    monkeypatch.setattr(jax, "default_backend", lambda: "gpu")
    assert precision.resolve("auto") == "bfloat16"
    assert precision.resolve("float32") == "float32"
    assert precision.resolve(None) is None



@pytest.mark.parametrize("native,expected", [(True, jnp.bfloat16), (False, None)])
def test_jax_dtype_resolves_auto_and_takes_names_and_dtypes(monkeypatch, native, expected):
    monkeypatch.setattr(precision, "native_bf16", lambda: native)
    assert precision.jax_dtype("auto") == expected   # a pod's sampler, a trainer's gather
    assert precision.jax_dtype("bfloat16") == jnp.bfloat16
    assert precision.jax_dtype(jnp.float32) == jnp.float32
    assert precision.jax_dtype(None) is None
    assert precision.jax_dtype("") is None
