"""The main job on one machine: environments, warm start, async multi-task RL, evaluation.

    python -m launch.local [--config=configs/local_default.py[:fast]] [--config.KEY=VALUE ...]

Stages, each recorded in `RUN_DIR/stages.json` when done (so rerunning the same command after a
crash, even `kill -9`, skips finished stages and resumes RL from its last checkpoint):

  1. demos          each task's oracle played on `demos.per_task` train indices spread over
                    the split (cached), and each task's data built for both splits
                    (sandboxed workers only read it)
  2. environments   a controller and, per task, a train-split and a test-split worker, each in
                    its own sandbox (the OS task's, under a root launcher, beside them: its
                    machines are its sandboxes, docs/security.md), or `env.controller_url`:
                    any AgentRL-compatible fleet
  3. sft            tokenizer + model warm-started on the demonstrations (cached by config;
                    RUN_DIR/sft_model links to it)
  4. eval_before    the evaluated test subset, before RL (and, with `eval.validate`, the
                    validation slice: `validation_before`)
  5. rl             asynchronous multi-task RL on the train split less the validation slice
                    (checkpoints in RUN_DIR/checkpoints); the episodes played by our agent
                    loop or (`rollouts="openai_agent"`) by an agent program over the OpenAI
                    server (configs/local_openai_agent.py)
  6. eval_after     the same test subset after RL (`validation_after`); the final policy in
                    RUN_DIR/final_model
  7. report         RUN_DIR/results.md (per task before/after with 95% intervals and the
                    paired difference) and RUN_DIR/success.png; the stage times

With `game_stage` (the default's), the same stages then run again for tic-tac-toe
(`config.game`, configs/local_tictactoe.py) under RUN_DIR/tictactoe: a game a small model
masters, so that the run shows RL making its agent better.

Which indices are evaluated and held out: `agentrl_jax.evaluation.protocol`.

Metrics: RUN_DIR/metrics.jsonl and TensorBoard (`tensorboard --logdir RUN_DIR/tensorboard`).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import pathlib
import shutil
import time
from typing import Any

import ml_collections
from absl import app
from jax.sharding import Mesh
from ml_collections import config_flags
from tqdm import tqdm

from agentrl_jax import compile_cache, hostmem, precision, stage_clock
from agentrl_jax.cache_dirs import cache_root
from agentrl_jax.controller.client import ControllerClient
from agentrl_jax.controller.task_keys import parse_task_key, task_key
from agentrl_jax.evaluation import agentbench, copy_probe, first_call, protocol
from agentrl_jax.evaluation.transcripts import TranscriptLog
from agentrl_jax.experiment import demonstrations, report, rl_stage
from agentrl_jax.experiment import policy as policy_lib
from agentrl_jax.experiment.metrics import MetricsLog
from agentrl_jax.parallel.mesh import single_device_mesh
from agentrl_jax.pipeline.trainer_driver import trainer_config
from agentrl_jax.sft import copy_stage, copy_swap
from agentrl_jax.sft import demos as demos_lib
from agentrl_jax.sft import stage as sft_stage
from launch import process

REPO_ROOT = pathlib.Path(__file__).resolve().parent.parent
_CONFIG = config_flags.DEFINE_config_file(
    "config", str(REPO_ROOT / "configs" / "local_default.py"), "run configuration")
log = logging.getLogger("launch.local")


# ----------------------------------------------------------------------------- run directory


class RunDir:
    """The run's directory and its record of finished stages."""

    def __init__(self, path: str | pathlib.Path):
        self.path = pathlib.Path(path).resolve()
        self.path.mkdir(parents=True, exist_ok=True)
        (self.path / "logs").mkdir(exist_ok=True)
        self._stages_file = self.path / "stages.json"
        self._last_mark = time.monotonic()

    def stages(self) -> dict[str, Any]:
        if not self._stages_file.exists():
            return {}
        return json.loads(self._stages_file.read_text())

    def done(self, stage: str) -> bool:
        return stage in self.stages()

    def mark(self, stage: str, **info: Any) -> None:
        """Records `stage` as done, with its seconds: the time since the previous stage (or
        this process) started."""
        now = time.monotonic()
        stages = self.stages()
        stages[stage] = {"finished": time.time(), "seconds": round(now - self._last_mark, 1),
                         **info}
        self._last_mark = now
        stage_clock.mark(stage)
        tmp = self._stages_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(stages, indent=1) + "\n")
        tmp.replace(self._stages_file)   # atomic: a kill never leaves a torn file

    def check_config(self, config: ml_collections.ConfigDict) -> None:
        """Writes config.json; refuses to resume a run directory made with another config."""
        path = self.path / "config.json"
        text = config.to_json(indent=1, sort_keys=True)
        if path.exists() and self.stages() and path.read_text() != text:
            raise SystemExit(f"{self.path} holds a run with a different config; pass another "
                             "--config.run_dir or delete it")
        path.write_text(text)


# ----------------------------------------------------------------------------- stages


def start_environments(env: ml_collections.ConfigDict, run: RunDir, stack: contextlib.ExitStack
                       ) -> str:
    """The controller URL: `env.controller_url`, or a fleet started here (stopped on exit)."""
    if env.controller_url:
        return env.controller_url
    from environments.fleet import start_task_fleet

    splits = (env.train_split, env.test_split)
    print(f"environments: starting {len(env.tasks) * len(splits)} workers"
          f"{' (sandboxed)' if env.sandbox else ''}; logs in {run.path / 'logs'}")
    with stage_clock.span("env_wait"):
        fleet = stack.enter_context(start_task_fleet(
            env.tasks, splits, sandbox=env.sandbox, concurrency=env.concurrency,
            log_dir=run.path / "logs", allow_root_fallback=env.allow_root_fallback))
    (run.path / "fleet.json").write_text(json.dumps({
        "controller": {"url": fleet.url, "pid": fleet.controller.process.pid},
        "workers": [{"argv": w.argv, "url": w.url, "pid": w.process.pid}
                    for w in fleet.workers]}, indent=1))
    return fleet.url


def gather_demos(config: ml_collections.ConfigDict, run: RunDir) -> list[pathlib.Path]:
    paths = []
    for task in tqdm(config.env.tasks, desc="demonstrations", unit="task"):
        paths.append(demonstrations.oracle_demos(task, config.demos.split, config.demos.per_task,
                                                 log_dir=run.path / "logs"))
    return paths


def prepare_task_data(config: ml_collections.ConfigDict, run: RunDir) -> None:
    """Builds every task's data cache for the splits the workers will serve."""
    from environments.fleet import prepare_task_data as prepare

    with stage_clock.span("env_wait"):
        prepare(config.env.tasks, (config.env.train_split, config.env.test_split),
                run.path / "logs")


def _sft_key(config: ml_collections.ConfigDict, demo_paths: list[pathlib.Path]) -> str:
    """What decides the warm-started policy; equal keys share one cached result. An unset (None)
    SFT setting is left out, so adding one keeps the keys of the policies cached before it; an
    "auto" compute dtype counts as what it resolves to on this host."""
    sft = {**config.sft.to_dict(),
           "compute_dtype": precision.resolve(config.sft.get("compute_dtype"))}
    material = json.dumps({
        "model": config.model.to_dict(),
        "sft": {k: v for k, v in sft.items() if k != "cache_dir" and v is not None},
        "demos": [p.name for p in demo_paths], "max_tokens": config.demos.max_tokens,
        "texts": demos_lib.TEXTS_FORMAT,
    }, sort_keys=True, default=str)
    return hashlib.sha256(material.encode()).hexdigest()[:16]


def _progress(desc: str, stage: str, metrics: MetricsLog) -> sft_stage.StepCallback:
    """A step callback that shows a progress bar and logs the step's metrics under `stage`."""
    bar = tqdm(desc=desc, unit="step")

    def on_step(step: int, total: int, values: dict[str, float]) -> None:
        bar.total = total
        bar.update(1)
        bar.set_postfix(nll=f"{values['loss']:.3f}")
        metrics.write(stage, step, values)
        if step == total:
            bar.close()

    return on_step


def warm_start(config: ml_collections.ConfigDict, demo_paths: list[pathlib.Path],
               mesh: Mesh, metrics: MetricsLog) -> pathlib.Path:
    """The HF directory of the warm-started policy, trained now unless cached."""
    target = pathlib.Path(config.sft.cache_dir or cache_root() / "sft") / _sft_key(config,
                                                                                   demo_paths)
    if (target / "config.json").exists():
        print(f"warm start: cached {target}")
        return target
    demos = list(demos_lib.read_demos(demo_paths))
    if config.model.source == "scratch":
        policy = policy_lib.new_scratch_policy(config.model, demos_lib.demo_texts(demos))
    else:
        policy = policy_lib.pretrained_policy(config.model, demos_lib.demo_texts(demos))
    trained = copy_swap.with_swaps(demos, config.sft.copy_swap_fraction, config.sft.seed)
    trajectories = [demos_lib.demo_trajectory(policy.tokenizer, d, policy.end_of_turn_ids,
                                              config.sft.context_loss_weight) for d in trained]
    kept = [t for t in trajectories if len(t) <= config.demos.max_tokens]
    print(f"warm start: {len(kept)} demonstrations ({len(trajectories) - len(kept)} longer than "
          f"{config.demos.max_tokens} tokens left out), {sum(map(len, kept))} tokens, "
          f"{policy.model.cfg.num_params() / 1e6:.1f}M parameters")
    if config.sft.copy.sequences:
        copies = copy_stage.copy_sequences(kept, config.sft.copy, config.sft.seed)
        sft_stage.run_sft(policy.model, copies, copy_stage.stage_config(config.sft), mesh,
                          _progress("warm start (copy stage)", "sft_copy", metrics))
    sft_stage.run_sft(policy.model, kept, config.sft, mesh,
                      _progress("warm start (SFT)", "sft", metrics))
    partial = target.with_name(target.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    policy_lib.save_policy(policy, partial)
    target.parent.mkdir(parents=True, exist_ok=True)
    partial.rename(target)
    return target


def evaluated_tasks(config: ml_collections.ConfigDict, subset: str) -> list[str]:
    """The controller tasks `subset` evaluates: the test split's for "test", the train split's
    (its validation slice) for "validation"."""
    split = config.env.test_split if subset == "test" else config.env.train_split
    return [task_key(task, split) for task in config.env.tasks]


async def rl_task_indices(config, client) -> dict[str, list]:
    """Per trained task (`rl.tasks`), the indices RL draws from: the split less the validation
    slice."""
    tasks = {}
    for task in rl_stage.trained_tasks(config.rl, config.env.tasks):
        name = task_key(task, config.env.train_split)
        tasks[name] = protocol.rl_indices(await client.get_indices(name), config.demos.per_task,
                                          config.eval.validation_per_task)
    return tasks


async def evaluate(config, policy, engine, client, name: str, run: RunDir,
                   subset: str = "test") -> dict[str, Any]:
    per_task = config.eval.per_task if subset == "test" else config.eval.validation_per_task
    rl = ml_collections.ConfigDict(config.rl.to_dict())
    rl.sampling.temperature = config.eval.temperature
    agent = rl_stage.agent_spec(rl, policy)
    bar = tqdm(desc=name, unit="episode")
    transcripts = TranscriptLog()

    def on_start(total: int) -> None:
        bar.total = total
        bar.refresh()

    def on_episode(rollout) -> None:
        with stage_clock.span("eval_bookkeeping"):
            bar.update(1)
            transcripts(rollout)

    results = await agentbench.evaluate(
        client, engine, agent, evaluated_tasks(config, subset),
        select=protocol.selection(subset, per_task, reserved=config.demos.per_task),
        runs=config.eval.runs, concurrency=config.eval.concurrency, seed=config.seed,
        on_start=on_start, on_episode=on_episode)
    bar.close()
    with stage_clock.span("eval_bookkeeping"):
        print(agentbench.write(results, run.path, name))
        transcripts.write(run.path, name)
        write_first_calls(run, name, transcripts.episodes)
        return agentbench.to_json(results)


def _task_of(key: str) -> str:
    return parse_task_key(key).task


def write_first_calls(run: RunDir, name: str, episodes: list[dict[str, Any]]) -> None:
    """RUN_DIR/NAME_first_calls.json: per task, the first calls' format, whether they start as
    the oracle does, and the copy rate of the arguments (`evaluation.first_call.summarize`)."""
    demos = demos_lib.read_demos(run.stages()["demos"]["files"])
    tools, first_tools = first_call.demo_tools(demos, _task_of)
    summary = first_call.summarize(episodes, tools, first_tools, _task_of)
    (run.path / f"{name}_first_calls.json").write_text(json.dumps(summary, indent=1) + "\n")
    print(report.first_call_table(name, summary))


def probe_copying(model, tokenizer) -> dict[str, float]:
    """The copy probe of `model` (evaluation/copy_probe.py) over its tokenizer's ordinary
    tokens."""
    high = min(len(tokenizer), model.cfg.vocab_size)
    low, _ = copy_probe.probe_vocab(high, set(tokenizer.all_special_ids))
    return copy_probe.run_probe(model, (low, high))


class CopyProbeRecord:
    """RUN_DIR/copy_probe.json: the copy probe after the warm start and at each RL checkpoint
    (`{"warm_start": {...}, "rl_step_10": {...}}`), each entry written once."""

    def __init__(self, path: pathlib.Path):
        self.path = path

    def entries(self) -> dict[str, dict[str, float]]:
        return json.loads(self.path.read_text()) if self.path.exists() else {}

    def add(self, name: str, figures: dict[str, float]) -> None:
        entries = {**self.entries(), name: figures}
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(entries, indent=1) + "\n")
        tmp.replace(self.path)
        print(f"copy probe ({name}): NLL {figures['copy_probe_nll']:.3f} on random-token "
              f"repeats (ln V = {figures['copy_probe_ln_v']:.2f})")


# ----------------------------------------------------------------------------- the job


def rollout_source(config: ml_collections.ConfigDict, engine: Any, url: str) -> Any:
    """Who plays the RL episodes (`config.rollouts`): None for the pipeline's own agent loop;
    for "openai_agent", the agent program of `config.openai_agent` over the OpenAI server on
    `engine`, in this process, with the controller at `url` (serving/agent_rollouts.py)."""
    rollouts = config.get("rollouts", "agent_loop")
    if rollouts == "agent_loop":
        return None
    if rollouts == "openai_agent":
        from agentrl_jax.serving import agent_rollouts

        return agent_rollouts.source(config.openai_agent, engine=engine, controller_url=url,
                                     max_context=config.rl.engine.max_context)
    raise ValueError(f"rollouts must be 'agent_loop' or 'openai_agent', not {rollouts!r}")


async def rl_and_eval(config, run: RunDir, url: str, policy_dir: pathlib.Path,
                      metrics: MetricsLog) -> None:
    mesh = single_device_mesh()
    final_dir = run.path / "final_model"
    if run.done("rl"):
        policy_dir = final_dir
    policy = policy_lib.load_policy(policy_dir, config.model.parser)
    probes = CopyProbeRecord(run.path / "copy_probe.json")
    if not run.done("rl") and "warm_start" not in probes.entries():
        probes.add("warm_start", probe_copying(policy.model, policy.tokenizer))

    def probe_rl(step: int, model) -> dict[str, float]:
        figures = probe_copying(model, policy.tokenizer)
        probes.add(f"rl_step_{step}", figures)
        return figures

    with rl_stage.make_engine(config.rl, policy) as engine:
        async with ControllerClient(url) as client:
            if config.eval.before_rl and not run.done("eval_before"):
                if config.eval.validate:
                    await evaluate(config, policy, engine, client, "validation_before", run,
                                   subset="validation")
                await evaluate(config, policy, engine, client, "eval_before", run)
                run.mark("eval_before")
            if not run.done("rl"):
                tasks = await rl_task_indices(config, client)
                bar = tqdm(total=config.rl.pipeline.steps, desc="RL", unit="step")
                last = {"reward": 0.0, "success": 0.0}

                def on_step(r) -> None:
                    bar.n = r.step
                    last.update(reward=r.metrics.get("reward_mean", 0.0),
                                success=r.metrics.get("success", 0.0))
                    bar.refresh()

                def on_progress(p) -> None:   # a step takes minutes on a CPU
                    bar.set_postfix_str(
                        f"step {p.step}: {p.phase}, {p.episodes} episodes, {p.kept}/{p.drawn} "
                        f"groups kept; last step reward {last['reward']:.2f} success "
                        f"{last['success']:.2f}")

                result = await rl_stage.run_rl(
                    config.rl, policy=policy, engine=engine, trainer_mesh=mesh, client=client,
                    task_indices=tasks, run_dir=run.path, metrics=metrics, on_step=on_step,
                    on_progress=on_progress,
                    probe=probe_rl, rollouts=rollout_source(config, engine, url))
                bar.close()
                shutil.rmtree(final_dir, ignore_errors=True)
                policy_lib.save_policy(policy, final_dir)
                run.mark("rl", steps=config.rl.pipeline.steps, resumed_from=result.resumed_from)
            if not run.done("eval_after"):
                if config.eval.validate:
                    await evaluate(config, policy, engine, client, "validation_after", run,
                                   subset="validation")
                await evaluate(config, policy, engine, client, "eval_after", run)
                run.mark("eval_after")


def write_report(config, run: RunDir, metrics: MetricsLog) -> str:
    def tasks_of(name: str) -> dict[str, Any] | None:
        path = run.path / f"{name}.json"
        if not path.exists():
            return None
        rows = json.loads(path.read_text())["tasks"]
        return {parse_task_key(k).task: v for k, v in rows.items()}

    before, after = tasks_of("eval_before"), tasks_of("eval_after")
    paired = agentbench.paired_comparison(before, after) if before else None
    table = report.results_table(before, after, paired)
    parts = ["# Results\n", "Test subset before and after RL (success %, 95% intervals; "
             "`agentrl_jax/evaluation/protocol.py`):\n", table]
    validation = tasks_of("validation_before"), tasks_of("validation_after")
    if validation[0] and validation[1]:   # the slice settings are decided on (`eval.validate`)
        v_paired = agentbench.paired_comparison(*validation)
        parts += ["Validation slice before and after RL (held-out train indices, for "
                  "decisions):\n", report.results_table(*validation, v_paired)]
        (run.path / "validation_paired_difference.json").write_text(
            json.dumps(v_paired, indent=1) + "\n")
    for name in ("validation_before", "validation_after", "eval_before", "eval_after"):
        if (run.path / f"{name}.md").exists():
            parts.append((run.path / f"{name}.md").read_text())
        calls = run.path / f"{name}_first_calls.json"
        if calls.exists():
            parts.append(report.first_call_table(name, json.loads(calls.read_text())))
    probes = CopyProbeRecord(run.path / "copy_probe.json").entries()
    if probes:
        parts.append(report.copy_probe_table(probes))
    parts.append(report.stage_times(run.stages()))
    if paired is not None:
        (run.path / "paired_difference.json").write_text(json.dumps(paired, indent=1) + "\n")
    (run.path / "results.md").write_text("\n".join(parts))
    records = [{**r, **{parse_task_key(k.removesuffix("/success")).task + "/success": v
                        for k, v in r.items() if k.endswith("/success")}}
               for r in metrics.records("rl")]
    report.plot_success(
        records, list(config.env.tasks), run.path / "success.png",
        before={t: r["success_mean"] for t, r in (before or {}).items()},
        after={t: r["success_mean"] for t, r in after.items()},
        intervals={when: {t: (r["success_interval"]["low"], r["success_interval"]["high"])
                          for t, r in (rows or {}).items()}
                   for when, rows in (("before", before), ("after", after))})
    return table


GAME_STAGE_DIR = "tictactoe"


def run_job(config: ml_collections.ConfigDict) -> pathlib.Path:
    """Runs (or resumes) every stage; returns the run directory."""
    trainer_config(config.rl)   # a trainer temperature apart from the sampler's, before any stage
    run = RunDir(config.run_dir)
    run.check_config(config)
    metrics = MetricsLog(run.path)
    started = time.monotonic()
    with contextlib.ExitStack() as stack:
        stack.callback(metrics.close)
        if not run.done("demos"):
            # Unsandboxed, so that each task builds its data caches (a sandboxed worker
            # only reads them).
            demo_paths = gather_demos(config, run)
            prepare_task_data(config, run)
            run.mark("demos", files=[str(p) for p in demo_paths])
        url = start_environments(config.env, run, stack)
        if not run.done("sft"):
            demo_paths = [pathlib.Path(p) for p in run.stages()["demos"]["files"]]
            policy_dir = warm_start(config, demo_paths, single_device_mesh(), metrics)
            link = run.path / "sft_model"   # the run directory shows everything it used
            link.unlink(missing_ok=True)
            link.symlink_to(policy_dir, target_is_directory=True)
            run.mark("sft", policy_dir=str(policy_dir))
        policy_dir = pathlib.Path(run.stages()["sft"]["policy_dir"])
        # The sampler's many shapes only grow a kept heap (agentrl_jax/hostmem.py).
        hostmem.release_freed_memory()
        asyncio.run(rl_and_eval(config, run, url, policy_dir, metrics))
    table = write_report(config, run, metrics)
    run.mark("report", total_seconds=round(time.monotonic() - started, 1))
    print("\n" + table + "\n" + report.stage_times(run.stages()) + f"\nrun directory: {run.path}")
    return run.path


def main(argv: list[str]) -> None:
    process.begin(argv)
    compile_cache.enable()   # compiled programs reused across runs (agentrl_jax/compile_cache.py)
    stage_clock.from_environment()   # AGENTRL_JAX_STAGE_CLOCK=PATH: the stages' split (#30)
    hostmem.keep_freed_memory()  # the warm start's buffers stay mapped (agentrl_jax/hostmem.py)
    config = _CONFIG.value
    run_job(config)
    if config.get("game_stage"):
        run_job(game_stage_config(config))


def game_stage_config(config: ml_collections.ConfigDict) -> ml_collections.ConfigDict:
    """The main job's tic-tac-toe stage (`config.game`): a job of its own under
    RUN_DIR/tictactoe, with the main job's warm-start cache."""
    game = config.game.copy_and_resolve_references()
    game.run_dir = str(pathlib.Path(config.run_dir) / GAME_STAGE_DIR)
    game.sft.cache_dir = config.sft.cache_dir
    return game


if __name__ == "__main__":
    app.run(main)
