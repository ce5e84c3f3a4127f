"""What a compute dtype of "auto" means on this host: bf16 where its products run natively.

A bf16 product with fp32 accumulation (`models/matmul.py`) is the fast path on GPUs and TPUs,
and on CPUs with bf16 dot instructions: measured 2x fp32 with AVX512-BF16 (AMD Zen 4) and 4.2x
with AMX (Intel Sapphire Rapids). On a CPU without them XLA emulates it, and it is slower than
fp32: 0.65-0.8x on an AMD Zen 3 with AVX2 alone (docs/performance.md,
`benchmarks/machine_info.dot_rates`). So a config that wants "the fast dtype" says "auto", and
the trainer (RL and SFT) and the sampling engine resolve it here, each time they are built.
"""

from __future__ import annotations

import functools
import pathlib
from typing import Any

AUTO = "auto"
BF16_CPU_FLAGS = ("avx512_bf16", "amx_bf16")  # /proc/cpuinfo flags of native bf16 dots


@functools.cache
def cpu_flags() -> frozenset[str]:
    """This CPU's feature flags (/proc/cpuinfo; empty where it cannot be read)."""
    try:
        for line in pathlib.Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                return frozenset(line.split(":", 1)[1].split())
    except OSError:
        pass
    return frozenset()


def native_bf16() -> bool:
    """Whether JAX's default backend runs bf16 products natively: any accelerator, or a CPU
    with one of `BF16_CPU_FLAGS`."""
    import jax

    if jax.default_backend() != "cpu":
        return True
    return not cpu_flags().isdisjoint(BF16_CPU_FLAGS)


def resolve(dtype: str | None) -> str | None:
    """A configured compute dtype with "auto" resolved: "bfloat16" where `native_bf16()`,
    else None (the model's fp32). Any other value is returned as it is."""
    if dtype != AUTO:
        return dtype
    return "bfloat16" if native_bf16() else None


def jax_dtype(dtype: Any) -> Any:
    """`resolve(dtype)` as a JAX dtype (from a name, "auto", or a dtype), or None where the
    model keeps its own."""
    import jax.numpy as jnp

    name = resolve(dtype)
    return jnp.dtype(name) if name else None
