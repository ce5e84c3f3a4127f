"""What every benchmark JSON records about where and with what it ran."""

from __future__ import annotations

import json
import os
import pathlib
import platform

RESULTS_DIR = pathlib.Path(__file__).parent / "results"


def machine_info(dots: bool = True) -> dict[str, str | int | float]:
    """The host and versions; with `dots`, the host's product rates measured now."""
    import jax

    info: dict[str, str | int | float] = {
        "machine": platform.machine(),
        "processor": _cpu_model(),
        "cpu_count": os.cpu_count() or 0,
        "python": platform.python_version(),
        "jax": jax.__version__,
        "jax_backend": jax.default_backend(),
        "jax_devices": len(jax.devices()),
        **(dot_rates() if dots else {}),
    }
    try:
        import torch

        info["torch"] = torch.__version__
        info["torch_threads"] = torch.get_num_threads()
    except ImportError:
        pass
    try:
        import transformers

        info["transformers"] = transformers.__version__
    except ImportError:
        pass
    return info


def dot_rates(rows: int = 2048, inner: int = 576, cols: int = 1536) -> dict[str, float]:
    """This host's matrix-product rates, GFLOP/s, best of 5: `dot_fp32_gflops` (fp32
    operands) and `dot_bf16_gflops` (bf16 operands, fp32 result, the form XLA CPU runs
    natively where the CPU has bf16 instructions). Hosts of one machine kind differ (AVX512-BF16
    against AMX, 2x against 4x), so figures from different hosts compare only through these."""
    import time

    import jax
    import jax.numpy as jnp

    out = {}
    for name, dtype in (("fp32", jnp.float32), ("bf16", jnp.bfloat16)):
        a = jnp.ones((rows, inner), dtype)
        b = jnp.ones((inner, cols), dtype)
        dot = jax.jit(lambda x, y: jnp.dot(x, y, preferred_element_type=jnp.float32))
        dot(a, b).block_until_ready()
        best = float("inf")
        for _ in range(5):
            start = time.perf_counter()
            dot(a, b).block_until_ready()
            best = min(best, time.perf_counter() - start)
        out[f"dot_{name}_gflops"] = round(2 * rows * inner * cols / best / 1e9, 1)
    return out


def _cpu_model() -> str:
    try:
        for line in pathlib.Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def write_result(name: str, figures: dict, dots: bool = True) -> pathlib.Path:
    """Writes benchmarks/results/NAME.json: the figures plus the machine, flat. `dots=False`
    leaves out the product rates, for figures of a run made earlier, when the rates measured
    now would not describe it."""
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    path = RESULTS_DIR / f"{name}.json"
    path.write_text(json.dumps({**figures, **machine_info(dots)}, indent=2, sort_keys=True)
                    + "\n")
    return path
