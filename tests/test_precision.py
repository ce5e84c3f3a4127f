"""agentrl_jax.precision: "auto" is bf16 only where bf16 products run natively."""

from __future__ import annotations

import jax
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

