"""Benchmark: the OS task's reference solutions (oracle) through the main job's fleet (#31).

    sudo .venv/bin/python -m benchmarks.probes.oracle_os_fleet   # ~7 min; oracle_os_fleet.json

Starts the environments as `launch.local` does (`environments.fleet.start_task_fleet`, sandboxed as
configs/local_default.py asks, the main job's 64 sessions per worker): a controller and one OS
worker per split, train and test, which together hold dev.json and train.json (1026 problems).
As host root, `task_worker_placements` starts those workers outside a worker sandbox, in a mount
namespace of their own, with `root=overlay`. The oracle (environments/os_interaction/oracle.py)
plays every index of each split through the fleet's controller, as the trainer's rollouts do
(`environments.oracle.play_all` with the task's name: `ControllerClient`), 8 episodes in
flight, one split after the other. (Played at a worker directly, episodes that span one of the
controller's reconciliations are cancelled there: it did not start them.)

Records passed/total per split and per data file (an episode's `source`), every failure with its
reason, the roots the episodes' metrics recorded, the workers' command lines, the failures that
the unsandboxed worker's run (results/oracle_os_interaction.json) does not share, and the load.
Refuses to run where the fleet would not start the OS worker the main job's way (not host root).
"""

from __future__ import annotations

import asyncio
import collections
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from agentrl_jax.controller.task_keys import task_key
from benchmarks.machine_info import RESULTS_DIR, write_result
from environments.fleet import PRIVATE_MOUNTS, start_task_fleet
from environments.oracle import EpisodeRecord, load_oracle, play_all, summarize
from environments.registry import load_task

TASK, SPLITS = "os_interaction", ("train", "test")
IN_FLIGHT = 8   # as environments.oracle's default, which the unsandboxed figure used
SESSIONS = 64   # configs/local_default.py's env.concurrency


REPO_ROOT = Path(__file__).resolve().parents[2]


def portable(argv: list[str]) -> list[str]:
    """`argv` with paths inside the checkout made relative to it, so the result names no host."""
    root = str(REPO_ROOT) + os.sep
    return [word.removeprefix(root) for word in argv]


def placement(argv: list[str]) -> dict[str, Any]:
    """How the fleet started a worker, read from its command line."""
    params = [argv[i + 1] for i, word in enumerate(argv[:-1]) if word == "--param"]
    return {"sandboxed": "bwrap" in " ".join(argv),
            "private_mounts": argv[:len(PRIVATE_MOUNTS)] == list(PRIVATE_MOUNTS),
            "params": params}


def by_source(records: list[EpisodeRecord]) -> dict[str, dict[str, int]]:
    """{data file: {"episodes", "successes"}}, from each episode's `source` (e.g. dev-00003)."""
    counts: dict[str, dict[str, int]] = {}
    for record in records:
        name = str(record.metrics.get("source", "unknown")).split("-")[0] + ".json"
        entry = counts.setdefault(name, {"episodes": 0, "successes": 0})
        entry["episodes"] += 1
        entry["successes"] += record.success
    return counts


def unsandboxed_failures() -> dict[str, list[int]]:
    """{split: failed indices} of the unsandboxed worker's oracle run."""
    path = RESULTS_DIR / f"oracle_{TASK}.json"
    splits = json.loads(path.read_text()).get("by_split", {}) if path.exists() else {}
    return {split: sorted(f["index"] for f in summary["failures"])
            for split, summary in splits.items()}


def main() -> dict[str, Any]:
    if os.geteuid() != 0:
        sys.exit("run as host root: otherwise the fleet refuses the OS task (or, asked for the "
                 "fallback, gives it the seeded root), which is not what this measures")
    oracles = {split: load_oracle(TASK, load_task(TASK, split=split)) for split in SPLITS}
    load_before, started = os.getloadavg()[0], time.monotonic()
    with tempfile.TemporaryDirectory(prefix="oracle_os_fleet_") as logs, \
            start_task_fleet([TASK], SPLITS, sandbox=True, concurrency=SESSIONS,
                             log_dir=Path(logs)) as fleet:
        fleet_start_s = time.monotonic() - started
        workers = dict(zip(SPLITS, fleet.workers, strict=True))   # in start_task_fleet's order
        records = {}
        for split, worker in workers.items():
            indices = list(range(len(oracles[split].task.problems)))
            print(f"{task_key(TASK, split)}: the oracle on {len(indices)} episodes through "
                  f"{fleet.url} (worker {worker.url})", file=sys.stderr, flush=True)
            records[split] = asyncio.run(play_all(fleet.url, oracles[split], indices, IN_FLIGHT,
                                                  name=task_key(TASK, split)))
    everything = [r for split in SPLITS for r in records[split]]
    roots = collections.Counter(str(r.metrics.get("root", "none")) for r in everything)
    earlier = unsandboxed_failures()
    splits = {}
    for split in SPLITS:
        summary = summarize(TASK, split, records[split])
        for failure, record in zip(summary["failures"], [r for r in records[split]
                                                          if not r.success], strict=True):
            failure["source"] = record.metrics.get("source")
        summary["by_source"] = by_source(records[split])
        summary["not_failed_unsandboxed"] = sorted(
            set(f["index"] for f in summary["failures"]) - set(earlier.get(split, [])))
        summary["passed_here_failed_unsandboxed"] = sorted(
            set(earlier.get(split, [])) - set(f["index"] for f in summary["failures"]))
        splits[split] = summary
    files = by_source(everything)
    figures = {
        "task": TASK,
        "episodes": len(everything),
        "successes": sum(r.success for r in everything),
        "oracle_success": round(sum(r.success for r in everything) / len(everything), 4),
        "by_file": files,
        "roots": dict(roots),
        "every_root_overlay": set(roots) == {"overlay"},
        "workers": {split: {"argv": portable(w.argv), **placement(w.argv)}
                    for split, w in workers.items()},
        "by_split": splits,
        "in_flight": IN_FLIGHT,
        "sessions_per_worker": SESSIONS,
        "fleet_start_s": round(fleet_start_s, 1),
        "seconds": round(time.monotonic() - started, 1),
        "load_1min_before": round(load_before, 2),
        "load_1min_after": round(os.getloadavg()[0], 2),
    }
    path = write_result("oracle_os_fleet", figures)
    for split, summary in splits.items():
        print(f"{task_key(TASK, split)}: {summary['successes']}/{summary['episodes']}")
        for failure in summary["failures"]:
            print(f"  failed {failure['index']} ({failure['source']}): {failure['reason']}"[:300])
    print(f"all: {figures['successes']}/{figures['episodes']}, by file {files}, roots "
          f"{dict(roots)}; {path}")
    return figures


if __name__ == "__main__":
    main()
