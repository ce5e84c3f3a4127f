"""Keep freed host memory in the process (glibc), so XLA CPU buffers are not page-faulted anew.

XLA on CPU allocates every execution's buffers (temporaries, outputs) with malloc and frees them
when it returns. glibc serves large blocks with mmap, or from per-thread arenas that it trims,
and hands them back to the kernel on free; the next execution then page-faults and zeroes all
of them again, and a training step spends a large share of its CPU time in the kernel doing it
(the train-step benchmark's commit history has the figures).

`keep_freed_memory()` sets three glibc malloc options: one arena for all threads, no mmap for
large blocks, no trimming of the heap. Freed blocks then stay mapped and the next step reuses
them. The price: the process keeps its peak heap mapped
(resident) until it exits, and a process that runs many shapes (a sampler and a trainer with
several buckets) keeps the largest heap any of them needed, enough to exhaust a 24 GB machine
in a SmolLM2-135M main job. So it is opt-in, for CPU training
processes that run a few shapes: the CPU main job (`launch.local`) and the train-step benchmark
call it. The arena limit only binds threads that have not allocated yet, so it must run before
JAX starts its CPU client's threads (before the first array or device query).
Set AGENTRL_JAX_KEEP_FREED_MEMORY=0 to leave malloc as it is even there.

`release_freed_memory()` ends it: large blocks are mmapped and returned on free again, the top
of the heap is trimmed again, and what the heap holds free now goes back to the kernel
(`malloc_trim`). The main job calls it once its warm start is over, before the sampler starts:
a sampler runs many shapes (prefill, context and batch buckets), so a kept heap only grows
there, to 22 GB in a full-depth SmolLM2 job.
"""

from __future__ import annotations

import ctypes
import os
import platform

# mallopt parameters (glibc malloc.h)
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
_M_MMAP_MAX = -4
_M_ARENA_MAX = -8
# After release: glibc's defaults for the mmap count; for the thresholds, where glibc's own
# dynamic rule settles on 64-bit (the mmap threshold rises to at most 32 MiB, the trim threshold
# follows at twice it). Setting any of them turns that rule off, so they are set explicitly.
_DEFAULT_MMAP_MAX = 65536
_RELEASED_MMAP_THRESHOLD = 32 * 2**20
_RELEASED_TRIM_THRESHOLD = 2 * _RELEASED_MMAP_THRESHOLD

_applied = False


def keep_freed_memory() -> bool:
    """Applies the malloc options once (glibc on Linux only); True when they are in effect."""
    global _applied
    if _applied:
        return True
    if os.environ.get("AGENTRL_JAX_KEEP_FREED_MEMORY", "1") == "0":
        return False
    if platform.system() != "Linux" or not platform.libc_ver()[0] == "glibc":
        return False
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:
        return False
    ok = libc.mallopt(_M_ARENA_MAX, 1) == 1
    ok &= libc.mallopt(_M_MMAP_MAX, 0) == 1
    ok &= libc.mallopt(_M_TRIM_THRESHOLD, -1) == 1  # -1: never trim
    _applied = bool(ok)
    return _applied


def release_freed_memory() -> bool:
    """Undoes `keep_freed_memory` (but for the one arena) and hands the free heap back to the
    kernel; True when it had been in effect. Safe to call at any time, from any thread."""
    global _applied
    if not _applied:
        return False
    libc = ctypes.CDLL("libc.so.6")
    libc.mallopt(_M_MMAP_MAX, _DEFAULT_MMAP_MAX)
    libc.mallopt(_M_MMAP_THRESHOLD, _RELEASED_MMAP_THRESHOLD)
    libc.mallopt(_M_TRIM_THRESHOLD, _RELEASED_TRIM_THRESHOLD)
    libc.malloc_trim(0)
    _applied = False
    return True
