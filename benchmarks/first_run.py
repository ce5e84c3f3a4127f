"""The README's first command in a fresh clone, summarised: results/main_job_first_run.json.

`bash scripts/setup.sh && python -m launch.local` is run by hand (a fresh clone, every cache
moved aside, as a new user runs it: minutes to hours, so not from here). This reads what the
run left and writes one flat JSON: per stage its seconds (`stages.json`), per task the test
success before and after RL with Wilson 95% intervals and the paired difference, for the
AgentBench run (`agentbench_*`, its tasks' mean paired difference) and, where the run has one,
its tic-tac-toe stage (`tictactoe_*`). Another config's run (`configs/local_smollm2.py`, say)
is summarised the same way with `--name`.

    python -m benchmarks.first_run --run-dir CLONE/runs/local --setup-seconds 660 \
        --job-seconds 5100 --commit abc1234 --quiet "what else ran meanwhile"
"""

from __future__ import annotations

import argparse
import json
import pathlib
from typing import Any

from agentrl_jax.evaluation import intervals

COMMAND = "bash scripts/setup.sh && .venv/bin/python -m launch.local"


def _success(evaluation: dict[str, Any]) -> dict[str, tuple[int, int]]:
    """Per task (its name, without the split): (successes, episodes) of the first pass."""
    out = {}
    for key, entry in evaluation["tasks"].items():
        outcomes = [o for o in entry["outcomes"] if o.get("run", 0) == 0]
        out[key.rsplit("-", 1)[0]] = (sum(int(o["success"]) for o in outcomes), len(outcomes))
    return out


def run_figures(run_dir: pathlib.Path, prefix: str) -> dict[str, Any]:
    """`prefix`_STAGE_seconds, TASK_{before,after}_{success,low,high,n} and TASK_paired_* of one
    finished run directory (`prefix`_mean_paired_* where it has several tasks); the same with
    `validation_` in front for the validation slice, where the run evaluated it."""
    stages = json.loads((run_dir / "stages.json").read_text())
    figures: dict[str, Any] = {f"{prefix}_{name}_seconds": entry["seconds"]
                               for name, entry in stages.items()}
    figures[f"{prefix}_total_seconds"] = round(sum(e["seconds"] for e in stages.values()), 1)
    sft_steps = sum(1 for line in (run_dir / "metrics.jsonl").read_text().splitlines()
                    if json.loads(line)["stage"] == "sft")
    if sft_steps and "sft" in stages:
        figures[f"{prefix}_sft_seconds_per_step"] = round(stages["sft"]["seconds"] / sft_steps, 3)
    figures.update(_before_after(run_dir, "eval", "paired_difference.json", prefix, ""))
    if (run_dir / "validation_paired_difference.json").exists():
        figures.update(_before_after(run_dir, "validation", "validation_paired_difference.json",
                                     prefix, "validation_"))
    return figures


def _before_after(run_dir: pathlib.Path, evaluation: str, paired_file: str, prefix: str,
                  key: str) -> dict[str, Any]:
    """One evaluation's figures before and after RL, and their paired difference."""
    figures: dict[str, Any] = {}
    for when in ("before", "after"):
        results = json.loads((run_dir / f"{evaluation}_{when}.json").read_text())
        for task, (wins, n) in _success(results).items():
            interval = intervals.wilson(wins, n)
            figures.update({f"{key}{task}_{when}_success": interval.estimate,
                            f"{key}{task}_{when}_low": interval.low,
                            f"{key}{task}_{when}_high": interval.high,
                            f"{key}{task}_{when}_n": n})
    paired = json.loads((run_dir / paired_file).read_text())
    for task, entry in paired["tasks"].items():
        figures.update({f"{key}{task}_paired_{k}": entry[k]
                        for k in ("estimate", "low", "high", "n")})
    if len(paired["tasks"]) > 1:
        figures.update({f"{prefix}_{key}mean_paired_{k}": paired["mean"][k]
                        for k in ("estimate", "low", "high")})
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run-dir", type=pathlib.Path, required=True,
                        help="the fresh clone's runs/local (its tictactoe/ is read too)")
    parser.add_argument("--setup-seconds", type=float, required=True)
    parser.add_argument("--job-seconds", type=float, required=True,
                        help="the whole command's wall clock, set-up included")
    parser.add_argument("--commit", required=True, help="the clone's commit")
    parser.add_argument("--quiet", required=True, help="what else ran on the machine meanwhile")
    parser.add_argument("--name", default="main_job_first_run",
                        help="benchmarks/results/NAME.json")
    args = parser.parse_args()

    from benchmarks.machine_info import write_result

    figures: dict[str, Any] = {
        "command": COMMAND, "commit": args.commit, "fresh_clone_caches_moved_aside": True,
        "setup_seconds": args.setup_seconds, "job_seconds": args.job_seconds,
        "quiet": args.quiet,
        **run_figures(args.run_dir, "agentbench"),
    }
    if (args.run_dir / "tictactoe").is_dir():   # the main job's game stage (not in every config)
        figures.update(run_figures(args.run_dir / "tictactoe", "tictactoe"))
    print(json.dumps(figures, indent=1))
    # the host's product rates measured now would not describe a run made earlier
    print("wrote", write_result(args.name, figures, dots=False))


if __name__ == "__main__":
    main()
