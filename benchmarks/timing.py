"""How the benchmarks time a call: the median of repeats after warm-up calls."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable


def median_seconds(fn: Callable[[], object], repeats: int, warmup: int = 1) -> float:
    """Median wall seconds of `fn()` over `repeats` calls, after `warmup` untimed calls (which
    compile). `fn` must block until its work is done (`block_until_ready` on JAX results)."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)
