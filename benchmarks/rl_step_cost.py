"""What an RL step of SmolLM2 costs per trained episode: the earlier settings against the
current `configs/local_smollm2.py`, from the same warm start, in one run.

    python -m benchmarks.rl_step_cost                 # both arms, 2 steps each
    python -m benchmarks.rl_step_cost --steps=3 --arms=current --name=rl_step_cost_current
    python -m benchmarks.rl_step_cost --arms=current,lora --name=rl_step_cost_lora

The policy is the warm start of `configs/local_smollm2.py` (`--policy` names another): taken
from the warm-start cache (`experiment/warm_start.py`), or made first, with the main job's
demonstrations, if this host has none (on a 2-core CPU ~70 min in fp32 on a Zen 3 without
bf16 instructions, ~28 min in bf16 with AMX; each arm's first step another ~35 min there).

Each arm runs `--steps` RL steps of the real pipeline (sandboxed task workers, the sampling
engine, the trainer, weight sync; `experiment.rl_stage.run_rl`) from the warm-started policy,
in a fresh run directory, one arm after the other on the same fleet:

* `earlier`: the settings before the cost work: every task (ALFWorld included), groups of 4,
  5 groups a step drawn from at most 12, the trainer in bf16 on any host, the sampler in fp32;
* `current`: `configs/local_smollm2.py` as it is;
* `lora` (only when `--arms` names it): `configs/local_smollm2.py:lora`, the same with LoRA
  adapters (rank 16 on every projection) trained over the frozen warm start.

The cost of an arm is its RL wall time (first step's compilations included, as a run pays them)
over the episodes it trained (`num_rollouts_trained`); `cost_ratio` is current over earlier,
the same less each arm's compilation time (`uncompiled_cost_ratio`, from the stage clock), and
over the steps after the first (`steady_cost_ratio`, with `--steps` of 2 or more); with the
`lora` arm, `lora_cost_ratio` (and its uncompiled and steady ratios) is lora over current.
Per arm the JSON also has the groups drawn and discarded for want of reward variance, the
episodes and tokens played and trained, and the seconds per trained token, since the arms
train different tasks, whose episodes differ in length.

Where each arm's time goes (compile, train step, prefill, decode, weight transfer, waiting on
the environments, idle) is split by `agentrl_jax/stage_clock.py`: printed as a table and kept
under `clock_ARM_...` keys.

Writes benchmarks/results/NAME.json (flat, the host's dot rates with it). `--name` defaults to
rl_step_cost, the default arms' file; name a run of other arms otherwise, so it does not
replace that one.
"""

from __future__ import annotations

import argparse
import asyncio
import pathlib
import tempfile
import time
from typing import Any

import jax
import ml_collections

from agentrl_jax import stage_clock
from agentrl_jax.controller.client import ControllerClient
from agentrl_jax.controller.task_keys import task_key
from agentrl_jax.evaluation import protocol
from agentrl_jax.experiment import demonstrations, rl_stage, run_config
from agentrl_jax.experiment import policy as policy_lib
from agentrl_jax.experiment.metrics import MetricsLog
from agentrl_jax.experiment.warm_start import warm_start
from agentrl_jax.parallel.mesh import make_mesh, single_device_mesh
from benchmarks.machine_info import write_result
from configs import local_smollm2

# What `configs/local_smollm2.py` set before the RL step's cost was worked on.
EARLIER = {
    "rl.tasks": (),
    "rl.engine.compute_dtype": None,
    "rl.trainer.compute_dtype": "bfloat16",
    "rl.pipeline.group_size": 4,
    "rl.pipeline.groups_per_step": 5,
    "rl.pipeline.max_draws_per_step": 12,
    "rl.pipeline.rollout_workers": 8,
}
ARMS = ("earlier", "current", "lora")
DEFAULT_ARMS = ("earlier", "current")


def arm_config(arm: str, steps: int) -> ml_collections.ConfigDict:
    config = local_smollm2.get_config("lora" if arm == "lora" else "")
    if arm == "earlier":
        for dotted, value in EARLIER.items():
            *path, key = dotted.split(".")
            node = config
            for part in path:
                node = node[part]
            node[key] = value
    config.rl.pipeline.steps = steps
    config.rl.checkpoint.every = steps   # one save, at the end, as a short run makes
    return config


async def run_arm(arm: str, steps: int, policy_dir: pathlib.Path, url: str) -> dict[str, Any]:
    config = arm_config(arm, steps)
    policy = policy_lib.load_policy(policy_dir, config.model.parser)
    served = list(config.env.tasks)
    reports: list[dict[str, float]] = []
    step_ends: list[float] = []
    with tempfile.TemporaryDirectory(prefix=f"rl_step_cost_{arm}_") as run_dir:
        metrics = MetricsLog(pathlib.Path(run_dir))
        with rl_stage.make_engine(config.rl, policy) as engine:
            async with ControllerClient(url) as client:
                tasks = {}
                for task in rl_stage.trained_tasks(config.rl, served):
                    name = task_key(task, config.env.train_split)
                    tasks[name] = protocol.rl_indices(
                        await client.get_indices(name), config.demos.per_task,
                        config.eval.validation_per_task)

                def on_step(report) -> None:
                    step_ends.append(time.perf_counter())
                    reports.append(dict(report.metrics))
                    m = report.metrics
                    print(f"  {arm} step {report.step}: {m.get('step_seconds', 0):.0f} s, "
                          f"{int(m.get('num_rollouts_trained', 0))} trained of "
                          f"{int(m.get('groups_drawn', 0))} groups drawn "
                          f"({int(m.get('groups_discarded_no_variance', 0))} without variance)",
                          flush=True)

                started = time.perf_counter()
                await rl_stage.run_rl(
                    config.rl, policy=policy, engine=engine,
                    trainer_mesh=make_mesh(devices=jax.devices()[:1]), client=client,
                    task_indices=tasks, run_dir=run_dir, metrics=metrics, on_step=on_step)
        metrics.close()
    return summarise(arm, config, reports, started, step_ends)


def summarise(arm: str, config, reports: list[dict[str, float]], started: float,
              step_ends: list[float]) -> dict[str, Any]:
    def total(key: str, rows=reports) -> float:
        return float(sum(r.get(key, 0.0) for r in rows))

    trained = total("num_rollouts_trained")
    seconds = step_ends[-1] - started
    steady = reports[1:]
    steady_seconds = step_ends[-1] - step_ends[0]
    steady_trained = total("num_rollouts_trained", steady)
    group = int(config.rl.pipeline.group_size)
    figures = {
        "tasks": ",".join(rl_stage.trained_tasks(config.rl, list(config.env.tasks))),
        "group_size": group,
        "groups_per_step": int(config.rl.pipeline.groups_per_step),
        "sampler_dtype": config.rl.engine.compute_dtype or "float32",
        "steps": len(reports),
        "seconds": round(seconds, 1),
        "groups_drawn": total("groups_drawn"),
        "groups_discarded": total("groups_discarded_no_variance"),
        "episodes_played": total("groups_drawn") * group,
        "episodes_trained": trained,
        "tokens_trained": total("num_loss_tokens"),
        # what the train steps computed on: the episodes' whole contexts, and packed rows
        "tokens_computed": total("num_input_tokens"),
        "row_tokens": total("num_row_tokens"),
        "seconds_per_trained_episode": round(seconds / trained, 2) if trained else float("inf"),
    }
    if steady:   # the steps after the first, where nothing compiles any more
        figures["steady_seconds_per_trained_episode"] = (
            round(steady_seconds / steady_trained, 2) if steady_trained else float("inf"))
    figures["ms_per_trained_token"] = (round(1e3 * seconds / figures["tokens_trained"], 2)
                                       if figures["tokens_trained"] else float("inf"))
    print(f"{arm}: {figures}")
    return figures


def warm_started_policy(log_dir: pathlib.Path) -> pathlib.Path:
    """The warm start of `configs/local_smollm2.py` (cached, or made now, with the main job's
    demonstrations), and each task's train data built for the fleet."""
    from environments.fleet import prepare_task_data

    config = run_config.resolve(local_smollm2.get_config())
    paths = [demonstrations.oracle_demos(task, config.demos.split, config.demos.per_task,
                                         log_dir=log_dir) for task in config.env.tasks]
    prepare_task_data(config.env.tasks, (config.env.train_split,), log_dir)
    metrics = MetricsLog(log_dir)
    try:
        return warm_start(config, paths, single_device_mesh(), metrics)
    finally:
        metrics.close()


async def main_async(args) -> dict[str, Any]:
    from environments.fleet import start_task_fleet

    config = local_smollm2.get_config()
    figures: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="rl_step_cost_fleet_") as logs:
        policy = (pathlib.Path(args.policy) if args.policy
                  else warm_started_policy(pathlib.Path(logs)))
        if not (policy / "config.json").exists():
            raise SystemExit(f"no policy at {policy}")
        print(f"policy: {policy}", flush=True)
        clock = stage_clock.enable()
        with start_task_fleet(config.env.tasks, (config.env.train_split,),
                              sandbox=config.env.sandbox, concurrency=config.env.concurrency,
                              log_dir=pathlib.Path(logs),
                              allow_root_fallback=config.env.allow_root_fallback) as fleet:
            stage_clock.mark("fleet")
            for arm in args.arms.split(","):
                print(f"arm {arm}: {args.steps} RL steps", flush=True)
                result = await run_arm(arm, args.steps, policy, fleet.url)
                figures.update({f"{arm}_{k}": v for k, v in result.items()})
                stage_clock.mark(arm)
    splits = [s for s in clock.splits() if s.stage != "fleet"]
    print("Where each arm's wall clock went (exclusive shares, agentrl_jax/stage_clock.py):")
    print(stage_clock.table(splits))
    figures.update({f"clock_{k}": round(v, 3) for k, v in stage_clock.flat_figures(splits).items()})
    for arm in ARMS:   # the arm's time less its compilations, per trained episode
        compile_s = figures.get(f"clock_{arm}_compile_seconds")
        if compile_s is not None and figures.get(f"{arm}_episodes_trained"):
            figures[f"{arm}_uncompiled_seconds_per_trained_episode"] = round(
                (figures[f"{arm}_seconds"] - compile_s) / figures[f"{arm}_episodes_trained"], 2)
    for key, name in (("seconds_per_trained_episode", "cost_ratio"),
                      ("uncompiled_seconds_per_trained_episode", "uncompiled_cost_ratio"),
                      ("steady_seconds_per_trained_episode", "steady_cost_ratio")):
        for arm, base, prefix in (("current", "earlier", ""), ("lora", "current", "lora_")):
            if f"{arm}_{key}" in figures and f"{base}_{key}" in figures:
                figures[prefix + name] = round(figures[f"{arm}_{key}"] / figures[f"{base}_{key}"],
                                               3)
                print(f"{arm} / {base}, {key.replace('_', ' ')}: {figures[prefix + name]}")
    return figures


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--policy", default="",
                        help="the warm-started policy's directory (default: the warm start of "
                             "configs/local_smollm2.py, made if not cached)")
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--arms", default=",".join(DEFAULT_ARMS), help=f"any of {ARMS}")
    parser.add_argument("--name", default="rl_step_cost", help="benchmarks/results/NAME.json")
    args = parser.parse_args()
    unknown = set(args.arms.split(",")) - set(ARMS)
    if unknown:
        parser.error(f"unknown arms {sorted(unknown)} (known: {ARMS})")
    figures = asyncio.run(main_async(args))
    print(f"wrote {write_result(args.name, figures)}")


if __name__ == "__main__":
    main()
