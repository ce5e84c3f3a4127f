"""Oracle demonstrations for the supervised warm start, played once and cached.

Each task's demonstrator (`environments/<task>/oracle.py`: its `Oracle`, or its `Demonstrator`
where it defines one, see `environments/oracle.py`) is played on `limit` indices spread evenly
over a split (`evaluation.protocol.demo_indices`: a split's front is often one kind of problem)
through a real task worker, by `python -m environments.oracle --demonstrator --export` in a
subprocess, and the episodes are kept as JSONL under the cache (`cache_dirs.cache_root()/demos`).
A file is written under a temporary name and renamed when complete, so a killed run never leaves
a partial cache behind; a later run (or another run directory) reuses it.
"""

from __future__ import annotations

import contextlib
import os
import pathlib
import subprocess
import sys

from agentrl_jax import stage_clock
from agentrl_jax.cache_dirs import cache_root

REPO_ROOT = pathlib.Path(__file__).resolve().parents[2]


# Raised whenever what the oracles export changes: the cached files' names carry it, and the
# warm start's cache key carries their names. 2: tool-call arguments keep non-ASCII characters
# (`Chhindwāra`, not `Chhindw\u0101ra`). 3: the OS oracle's scripts lose their comment lines.
# 4: the tic-tac-toe demonstrator notes the free cells before each move.
DEMO_FORMAT = 4


def demo_path(task: str, split: str, limit: int) -> pathlib.Path:
    """Where `limit` spread oracle episodes of `task` on `split` are cached."""
    return cache_root() / "demos" / f"{task}-{split}-spread{limit}-v{DEMO_FORMAT}.jsonl"


def oracle_demos(task: str, split: str = "train", limit: int = 100,
                 log_dir: pathlib.Path | None = None) -> pathlib.Path:
    """The path of `limit` demonstrator episodes of `task` (playing them if not cached)."""
    path = demo_path(task, split, limit)
    if path.exists():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    summary = partial.with_suffix(".json")
    argv = [sys.executable, "-m", "environments.oracle", "--task", task, "--split", split,
            "--spread", str(limit), "--demonstrator", "--export", str(partial),
            "--output", str(summary)]
    log = (open(log_dir / f"oracle_{task}.log", "w") if log_dir
           else contextlib.nullcontext(subprocess.DEVNULL))
    with log as stdout, stage_clock.span("env_wait"):
        done = subprocess.run(argv, cwd=REPO_ROOT, stdout=stdout, stderr=subprocess.STDOUT)
    summary.unlink(missing_ok=True)
    if done.returncode != 0 or not partial.exists():
        partial.unlink(missing_ok=True)
        where = f" (see {log_dir / f'oracle_{task}.log'})" if log_dir else ""
        raise RuntimeError(f"playing the {task} oracle failed with code {done.returncode}{where}")
    partial.rename(path)
    return path
