"""Where the main job's minutes go: each stage of `launch.local` split by the stage clock (#30).

Runs `python -m launch.local` as it is run (a subprocess, the real sandboxed fleet) in a fresh
run directory with a fresh warm-start cache, so every stage does its work, and with
`AGENTRL_JAX_STAGE_CLOCK` set, so the job records its own split (`agentrl_jax/stage_clock.py`:
the categories, what overlaps and what `idle` means). The compilation cache is cold by
default (a fresh folder: a first run, its writes included); `--compile-cache warm` uses the
project's, `off` none. The oracle demonstrations come from their cache when it holds them
(`demos_cached` says which).

Prints the table (exclusive shares of each stage's wall clock) and writes NAME.json: per stage
`STAGE_seconds`, `STAGE_CATEGORY_share` and `_seconds` (exclusive), `STAGE_CATEGORY_busy_seconds`
(overlapping), `STAGE_cpu_seconds`, `STAGE_compilations`; over the job `CATEGORY_share`,
`total_seconds`; the load average before and after (the machine is shared), the job's peak
resident memory, and the machine.

    python -m benchmarks.main_job                                  # the :fast config
    python -m benchmarks.main_job --config default --name main_job_default \\
        --set rl.pipeline.steps=2 --set eval.per_task=4            # the default, reduced
    python -m benchmarks.main_job --config default --compile-cache warm --sft-cache warm \\
        --name main_job_default_second                             # a second run: caches warm

A run made elsewhere with `AGENTRL_JAX_STAGE_CLOCK=PATH` set (the README's first command in a
fresh clone, say) is summarised the same way, without running anything:

    python -m benchmarks.main_job --from-run RUN_DIR --clock PATH --name main_job_default_first \
        [--time-log LOG]   # LOG: that command's `/usr/bin/time -v` report (peak RSS, wall clock)
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import re
import resource
import subprocess
import sys
import tempfile
import time

REPO_ROOT = pathlib.Path(__file__).resolve().parent.parent
CONFIGS = {  # --config -> (module under configs/, its get_config mode)
    "fast": ("local_default", "fast"),
    "default": ("local_default", ""),
    "smollm2": ("local_smollm2", ""),
}


def _get_config(config: str):
    import importlib

    module, mode = CONFIGS[config]
    return importlib.import_module(f"configs.{module}").get_config(mode)


def job_command(config: str, run_dir: pathlib.Path, sft_cache: pathlib.Path | None,
                overrides: list[str]) -> list[str]:
    """launch.local's argv; `sft_cache` None keeps the project's warm-start cache."""
    module, mode = CONFIGS[config]
    spec = f"configs/{module}.py" + (f":{mode}" if mode else "")
    cache = [] if sft_cache is None else [f"--config.sft.cache_dir={sft_cache}"]
    return [sys.executable, "-m", "launch.local", f"--config={spec}",
            f"--config.run_dir={run_dir}", *cache, *(f"--config.{o}" for o in overrides)]


def demos_cached(config: str, overrides: list[str]) -> bool:
    """Whether every task's oracle demonstrations are in the cache already."""
    from agentrl_jax.experiment.demonstrations import demo_path

    c = _get_config(config)
    per_task = int(next((o.split("=", 1)[1] for o in overrides
                         if o.startswith("demos.per_task=")), c.demos.per_task))
    return all(demo_path(t, c.demos.split, per_task).exists() for t in c.env.tasks)


def read_run(run_dir: pathlib.Path, clock: pathlib.Path):
    """(the stage clock's JSON, stages.json, metrics.jsonl's records) of a finished run."""
    clocked = json.loads(clock.read_text())
    stages = json.loads((run_dir / "stages.json").read_text())
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return clocked, stages, records


def launch(args: argparse.Namespace):
    """Runs the job with the stage clock on; what `read_run` returns, and the run's figures."""
    from agentrl_jax import compile_cache, stage_clock

    cached = demos_cached(args.config, args.set)
    with tempfile.TemporaryDirectory(prefix="main_job_") as tmp:
        work = pathlib.Path(tmp)
        env = dict(os.environ)
        env.pop("XLA_FLAGS", None)   # the job on this machine's one CPU device, as run
        env[stage_clock.ENV_VAR] = str(work / "stage_clock.json")
        if args.compile_cache == "cold":
            env[compile_cache.ENV_VAR] = str(work / "xla")
        elif args.compile_cache == "off":
            env[compile_cache.ENV_VAR] = "0"
        sft_cache = work / "sft" if args.sft_cache == "cold" else None
        argv = job_command(args.config, work / "run", sft_cache, args.set)
        print("running:", " ".join(argv[1:]), flush=True)
        load_start, started = os.getloadavg()[0], time.monotonic()
        with open(work / "log.txt", "wb") as log:
            done = subprocess.run(argv, cwd=REPO_ROOT, env=env, stdout=log,
                                  stderr=subprocess.STDOUT, check=False)
        wall = time.monotonic() - started
        if done.returncode != 0:
            raise SystemExit(f"the job failed ({done.returncode}):\n"
                             + (work / "log.txt").read_text()[-4000:])
        clocked, stages, records = read_run(work / "run", work / "stage_clock.json")
    figures: dict[str, object] = {
        "config": args.config, "overrides": " ".join(args.set),
        "compile_cache": args.compile_cache, "sft_cache": args.sft_cache,
        "demos_cached": cached, "job_wall_seconds": wall,
        "load_average_start": round(load_start, 2),
        "load_average_end": round(os.getloadavg()[0], 2),
        # the largest process among the job and its fleet (getrusage's children maximum)
        "peak_rss_gb": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 2**20,
    }
    return clocked, stages, records, figures


def gnu_time_figures(text: str) -> dict[str, float]:
    """`peak_rss_gb` and `command_wall_seconds` from GNU `time -v`'s report."""
    rss = re.search(r"Maximum resident set size \(kbytes\): (\d+)", text)
    wall = re.search(r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): ([\d:.]+)", text)
    figures = {}
    if rss:
        figures["peak_rss_gb"] = int(rss.group(1)) / 2**20
    if wall:
        seconds = 0.0
        for part in wall.group(1).split(":"):
            seconds = seconds * 60 + float(part)
        figures["command_wall_seconds"] = seconds
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", choices=tuple(CONFIGS), default="fast")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="a launch.local config override (--config.KEY=VALUE)")
    parser.add_argument("--compile-cache", choices=("cold", "warm", "off"), default="cold")
    parser.add_argument("--sft-cache", choices=("cold", "warm"), default="cold",
                        help="warm: the project's warm-start cache (a second run); cold: fresh")
    parser.add_argument("--from-run", type=pathlib.Path, default=None, metavar="RUN_DIR",
                        help="summarise this finished run instead of running one (needs --clock)")
    parser.add_argument("--clock", type=pathlib.Path, default=None,
                        help="the stage clock's JSON of --from-run")
    parser.add_argument("--time-log", type=pathlib.Path, default=None,
                        help="GNU `time -v` output of --from-run's command: its peak RSS and "
                             "wall clock (set-up included)")
    parser.add_argument("--name", default="main_job", help="benchmarks/results/NAME.json")
    args = parser.parse_args()

    from agentrl_jax import stage_clock
    from benchmarks.machine_info import write_result

    if args.from_run is not None:
        if args.clock is None:
            parser.error("--from-run needs --clock")
        clocked, stages, records = read_run(args.from_run, args.clock)
        figures: dict[str, object] = {"config": "as run", "from_run": args.from_run.name}
        if args.time_log is not None:
            figures.update(gnu_time_figures(args.time_log.read_text()))
    else:
        clocked, stages, records, figures = launch(args)
    splits = stage_clock.from_json(clocked["stages"])
    rl_steps = [r for r in records if r["stage"] == "rl"]
    figures.update({
        # RL steps whose every drawn group lacked reward variance (dynamic sampling): no update
        "rl_steps": len(rl_steps),
        "rl_steps_skipped": sum(bool(r.get("skipped_step")) for r in rl_steps),
        **{f"stages_json_{k}_seconds": v["seconds"] for k, v in stages.items()},
        **stage_clock.flat_figures(splits),
    })
    print(stage_clock.table(splits))
    print(f"{figures['total_seconds']:.0f} s in stages, compilations "
          f"{sum(s.compilations for s in splits)}, load {figures.get('load_average_start')} -> "
          f"{figures.get('load_average_end')}")
    print("most compile seconds:")
    for program, entry in list(clocked["programs"].items())[:8]:
        print(f"  {entry['seconds']:6.1f} s  {entry['compilations']:3d} x  {program}")
    figures["programs_compiled"] = len(clocked["programs"])
    figures.update({f"compile_top{i}_{k}": v for i, (program, entry) in
                    enumerate(list(clocked["programs"].items())[:5], start=1)
                    for k, v in (("program", program), ("seconds", entry["seconds"]),
                                 ("compilations", entry["compilations"]))})
    print("wrote", write_result(args.name, figures))


if __name__ == "__main__":
    main()
