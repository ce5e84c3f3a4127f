"""The main job as a graph of stages, each resumed from its marker in `RUN_DIR/stages.json`.

The same graph runs on one machine or a pod (`config.deployment`, `experiment/deployment.py`);
the stages marked (local) run only where the deployment warm-starts.

  demos (local) each task's oracle played on `demos.per_task` train indices spread over the
                split (cached), and each task's data built for both splits (sandboxed workers
                only read it)
  (environments a controller and, per task, a train- and a test-split worker, or
                `env.controller_url`; started on every run, before any model is loaded)
  sft (local)   the policy warm-started on the demonstrations (`experiment/warm_start.py`;
                RUN_DIR/sft_model links to it)
  eval_before   the test subset before RL (`eval.before_rl`; with `eval.validate`, the
                validation slice too: `validation_before`)
  rl            asynchronous multi-task RL on the train split less the validation slice
                (`experiment/rl_stage.py`; checkpoints in `run_dir`/checkpoints, from which a
                killed run resumes); on one machine the final policy in RUN_DIR/final_model
  select        with `eval.select_every`: the validation slice played with the RL checkpoints
                every that many steps and the last; the best is the final policy
                (`experiment/selection.py`; RUN_DIR/validation_step_N.*)
  eval_after    the same subset after RL (`validation_after`, unless `select` played it;
                `eval.after_rl`)
  export        with an `export` section: the trained policy as an HF directory in
                `export.dir` (default `run_dir`/final_model; a bucket URL too)
  report        RUN_DIR/results.md and success.png (`experiment/run_report.py`), once the
                evaluation after RL is done

A stage runs only if it is not marked done; each is marked only when its outputs are complete,
so the same command after a crash, even `kill -9`, skips what finished. The config is resolved
and frozen once (`experiment/run_config.py`); every stage reads that one object, which is also
what `RUN_DIR/config.json` holds. RUN_DIR is `run_dir`, or a local directory when `run_dir` is
a bucket URL (`run_dir.local_dir`).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import pathlib
import shutil
import time
from collections.abc import Awaitable, Callable
from typing import Any

import ml_collections
from tqdm import tqdm

from agentrl_jax import hostmem, stage_clock
from agentrl_jax.controller.client import ControllerClient
from agentrl_jax.controller.task_keys import task_key
from agentrl_jax.dataclass_config import mutable_copy
from agentrl_jax.evaluation import protocol
from agentrl_jax.experiment import (
    demonstrations,
    evaluation_stage,
    export_stage,
    pod_job,
    report,
    rl_stage,
    run_config,
    selection,
)
from agentrl_jax.experiment import policy as policy_lib
from agentrl_jax.experiment.deployment import DEPLOYMENTS, Deployment, Environments, LocalDeployment
from agentrl_jax.experiment.evaluation_stage import CopyProbeRecord, probe_copying
from agentrl_jax.experiment.metrics import MetricsLog
from agentrl_jax.experiment.run_dir import RunDir, is_url, local_dir
from agentrl_jax.experiment.run_report import write_report
from agentrl_jax.experiment.saved_policy import restore_step
from agentrl_jax.experiment.warm_start import warm_start
from agentrl_jax.parallel.mesh import single_device_mesh

GAME_STAGE_DIR = "tictactoe"


def _always(job: Job) -> bool:
    return True


def _never(job: Job) -> bool:
    return False


@dataclasses.dataclass(frozen=True)
class Stage:
    """One node of the graph: `run(job)` does the work and returns what its marker records.

    A stage runs when `enabled(job)` and it is not marked done, or `every_start(job)`; an
    unmarked stage (one that acquires something the later stages use, such as the
    environments) runs every time."""

    name: str
    run: Callable[[Job], Awaitable[dict[str, Any]]]
    enabled: Callable[[Job], bool] = _always
    marked: bool = True
    every_start: Callable[[Job], bool] = _never


class Job:
    """One run of the graph over one run directory (`run()`; resumable), led by this process
    on `deployment` (default: `config.deployment`'s)."""

    def __init__(self, config: ml_collections.ConfigDict, environments: Environments,
                 deployment: Deployment | None = None):
        self.config = run_config.resolve(config)
        self.environments = environments
        self.deployment = deployment or deployment_of(self.config)
        self.run_dir = RunDir(local_dir(self.config))
        # A run that resumes from its checkpoints takes a changed config (more steps, say):
        # the graph starts again over them. Elsewhere a changed config is refused.
        self.run_dir.check_config(self.config,
                                  restart=self.deployment.resumes_from_checkpoints)
        # Checkpoints (and the export's default) go to `run_dir` itself, a bucket URL too.
        self.checkpoint_root: str | pathlib.Path = (
            self.config.run_dir if is_url(self.config.run_dir)
            else pathlib.Path(self.config.run_dir).resolve())
        self.metrics = MetricsLog(self.run_dir.path)
        self._stack = contextlib.AsyncExitStack()
        self._url: str | None = None
        self._policy: policy_lib.Policy | None = None
        self._engine: Any = None
        self._client: ControllerClient | None = None

    # ------------------------------------------------------------------------- the graph

    async def _run(self) -> None:
        async with self._stack:
            self._stack.callback(self.metrics.close)
            for stage in STAGES:
                if not stage.enabled(self):
                    continue
                if not stage.marked:
                    await stage.run(self)
                elif stage.every_start(self) or not self.run_dir.done(stage.name):
                    self.run_dir.mark(stage.name, **await stage.run(self))

    def run(self) -> pathlib.Path:
        """Runs (or resumes) every stage, then the report; returns the run directory."""
        started = time.monotonic()
        asyncio.run(self._run())
        if self.run_dir.done("eval_after"):
            table = write_report(self.config, self.run_dir, self.metrics)
            self.run_dir.mark("report", total_seconds=round(time.monotonic() - started, 1))
            print("\n" + table + "\n" + report.stage_times(self.run_dir.stages()))
        print(f"run directory: {self.run_dir.path}", flush=True)
        self.deployment.finish(self.run_dir.path)
        return self.run_dir.path

    # ------------------------------------------------------------------------- resources

    def demo_files(self) -> list[str]:
        """The demonstrations' files, where the run played them."""
        return list(self.run_dir.record("demos")["files"]) if self.run_dir.done("demos") else []

    def start_dir(self) -> pathlib.Path:
        """The HF directory RL starts from: the warm start's, or the pretrained model's."""
        if self.deployment.warm_starts:
            return pathlib.Path(self.run_dir.record("sft")["policy_dir"])
        return policy_lib.pretrained_dir(self.config.model)

    async def policy_and_engine(self) -> tuple[policy_lib.Policy, Any, ControllerClient]:
        """The policy the next stage acts with (the final one once RL is done, else the one RL
        starts from), the sampler serving it and the controller's client, made once."""
        if self._policy is None:
            # The sampler's many shapes only grow a kept heap (agentrl_jax/hostmem.py).
            hostmem.release_freed_memory()
            trained = self.run_dir.done("rl") and not self.deployment.resumes_from_checkpoints
            directory = self.run_dir.path / "final_model" if trained else self.start_dir()
            self._policy, self._engine = self.deployment.open(directory, self._stack)
            probes = CopyProbeRecord(self.run_dir.path / "copy_probe.json")
            if (self.deployment.probes and not self.run_dir.done("rl")
                    and "warm_start" not in probes.entries()):
                probes.add("warm_start", probe_copying(self._policy.model,
                                                       self._policy.tokenizer))
            assert self._url is not None, "the environments start before any policy stage"
            self._client = await self._stack.enter_async_context(ControllerClient(self._url))
        assert self._client is not None
        return self._policy, self._engine, self._client

    async def evaluate(self, name: str, subset: str, step: int = 0) -> None:
        policy, engine, client = await self.policy_and_engine()
        await evaluation_stage.evaluate(self.config, policy, engine, client, name,
                                        self.run_dir.path, subset=subset,
                                        demo_files=self.demo_files(), metrics=self.metrics,
                                        step=step)

    # ------------------------------------------------------------------------- stages

    async def demos(self) -> dict[str, Any]:
        config, logs = self.config, self.run_dir.path / "logs"
        paths = [demonstrations.oracle_demos(task, config.demos.split, config.demos.per_task,
                                             log_dir=logs)
                 for task in tqdm(config.env.tasks, desc="demonstrations", unit="task")]
        with stage_clock.span("env_wait"):
            self.environments.prepare(config.env.tasks,
                                      (config.env.train_split, config.env.test_split), logs)
        return {"files": [str(p) for p in paths]}

    async def serve_environments(self) -> dict[str, Any]:
        with stage_clock.span("env_wait"):
            self._url = self._stack.enter_context(self.environments.serve(
                self.config.env, self.run_dir.path / "logs"))
        return {}

    async def sft(self) -> dict[str, Any]:
        paths = [pathlib.Path(p) for p in self.demo_files()]
        policy_dir = warm_start(self.config, paths, single_device_mesh(), self.metrics)
        link = self.run_dir.path / "sft_model"   # the run directory shows everything it used
        link.unlink(missing_ok=True)
        link.symlink_to(policy_dir, target_is_directory=True)
        return {"policy_dir": str(policy_dir)}

    async def eval_before(self) -> dict[str, Any]:
        if self.config.eval.get("validate"):
            await self.evaluate("validation_before", "validation")
        await self.evaluate("eval_before", "test")
        return {}

    async def rl(self) -> dict[str, Any]:
        config = self.config
        policy, engine, client = await self.policy_and_engine()
        probes = CopyProbeRecord(self.run_dir.path / "copy_probe.json")

        def probe(step: int, model: Any) -> dict[str, float]:
            figures = probe_copying(model, policy.tokenizer)
            probes.add(f"rl_step_{step}", figures)
            return figures

        tasks = {}
        for task in rl_stage.trained_tasks(config.rl, config.env.tasks):
            name = task_key(task, config.env.train_split)
            tasks[name] = protocol.rl_indices(
                await client.get_indices(name),
                config.demos.per_task if "demos" in config else 0,
                config.eval.get("validation_per_task", 0))   # a pod's: none held out
        steps = config.rl.pipeline.steps
        bar = tqdm(total=steps, desc="RL", unit="step")
        last = {"reward": 0.0, "success": 0.0}

        def on_step(r: Any) -> None:
            bar.n = r.step
            last.update(reward=r.metrics.get("reward_mean", 0.0),
                        success=r.metrics.get("success", 0.0))
            bar.write(f"step {r.step}/{steps}: reward {last['reward']:.3f} success "
                      f"{last['success']:.3f} grad_norm "
                      f"{r.metrics.get('grad_norm', float('nan')):.3g}")
            bar.refresh()

        def on_progress(p: Any) -> None:   # a step takes minutes on a CPU
            bar.set_postfix_str(
                f"step {p.step}: {p.phase}, {p.episodes} episodes, {p.kept}/{p.drawn} groups "
                f"kept; last step reward {last['reward']:.2f} success {last['success']:.2f}")

        assert self._url is not None
        result = await rl_stage.run_rl(
            config.rl, policy=policy, engine=engine, client=client, task_indices=tasks,
            run_dir=self.checkpoint_root, metrics=self.metrics, on_step=on_step,
            on_progress=on_progress, probe=probe if self.deployment.probes else None,
            rollouts=rollout_source(config, engine, self._url),
            **self.deployment.rl_options(policy, engine, self._url))
        bar.close()
        self.deployment.after_rl(result, self.run_dir.path)
        if not self.deployment.resumes_from_checkpoints:   # what a resumed run evaluates
            final_dir = self.run_dir.path / "final_model"
            shutil.rmtree(final_dir, ignore_errors=True)
            policy_lib.save_policy(policy, final_dir)
        return {"steps": steps, "resumed_from": result.resumed_from}

    async def select(self) -> dict[str, Any]:
        """Plays the validation slice with each candidate checkpoint (one evaluation written
        is not played again), then serves and saves the best as RUN_DIR/final_model."""
        policy, engine, _ = await self.policy_and_engine()
        checkpoints = pathlib.Path(rl_stage.checkpoint_dir(self.checkpoint_root))
        success = {}
        for step in selection.candidate_steps(self.config.rl.pipeline.steps,
                                              int(self.config.eval.select_every)):
            result = self.run_dir.path / f"validation_step_{step}.json"
            if not result.exists():
                await self._serve_checkpoint(policy, engine, checkpoints, step)
                await self.evaluate(result.stem, "validation", step=step)
            success[step] = json.loads(result.read_text())["average"]["success_mean"]
        best = selection.best_step(success)
        print(f"checkpoint chosen on validation: step {best} ("
              + ", ".join(f"step {k}: {v:.1%}" for k, v in success.items()) + ")", flush=True)
        await self._serve_checkpoint(policy, engine, checkpoints, best)
        final_dir = self.run_dir.path / "final_model"
        shutil.rmtree(final_dir, ignore_errors=True)
        policy_lib.save_policy(policy, final_dir)
        return {"step": best, "validation_success": {str(k): v for k, v in success.items()}}

    @staticmethod
    async def _serve_checkpoint(policy: policy_lib.Policy, engine: Any,
                                checkpoints: pathlib.Path, step: int) -> None:
        """The parameters of the RL checkpoint at `step` into `policy` and its sampler."""
        restore_step(policy, checkpoints, step)
        await engine.update_params(policy.model, version=step)

    async def eval_after(self) -> dict[str, Any]:
        steps = self.config.rl.pipeline.steps   # the step its metrics are logged at
        # After a selection, the chosen checkpoint's validation_step_N is the slice's "after".
        if self.config.eval.get("validate") and not self.run_dir.done("select"):
            await self.evaluate("validation_after", "validation", step=steps)
        await self.evaluate("eval_after", "test", step=steps)
        return {}

    async def export(self) -> dict[str, Any]:
        policy, _, _ = await self.policy_and_engine()
        target = export_stage.export(self.config, policy, self.run_dir.path)
        print(f"trained policy: {target}", flush=True)
        return {"dir": target}


STAGES: tuple[Stage, ...] = (
    Stage("demos", Job.demos, lambda job: job.deployment.warm_starts),
    Stage("environments", Job.serve_environments, marked=False),
    Stage("sft", Job.sft, lambda job: job.deployment.warm_starts),
    Stage("eval_before", Job.eval_before, lambda job: bool(job.config.eval.before_rl)),
    Stage("rl", Job.rl, every_start=lambda job: job.deployment.resumes_from_checkpoints),
    Stage("select", Job.select, lambda job: bool(job.config.eval.get("select_every"))),
    Stage("eval_after", Job.eval_after,
          lambda job: bool(job.config.eval.get("after_rl", True))),
    Stage("export", Job.export, lambda job: "export" in job.config),
)


def deployment_of(config: ml_collections.ConfigDict) -> Deployment:
    """The deployment `config.deployment` names (`experiment/deployment.py`): "local" or "pod"."""
    name = config.get("deployment", "local")
    if name == "local":
        return LocalDeployment(config)
    if name == "pod":
        return pod_job.PodDeployment(config)
    raise ValueError(f"deployment must be one of {DEPLOYMENTS}, not {name!r}")


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


def run_job(config: ml_collections.ConfigDict, environments: Environments,
            deployment: Deployment | None = None) -> pathlib.Path | None:
    """Runs (or resumes) the job of `config` on `deployment` (default `config.deployment`'s);
    returns its run directory, or None in a process that only follows the leader's."""
    config = run_config.resolve(config)
    deployment = deployment or deployment_of(config)
    if not deployment.leads:
        deployment.follow()
        return None
    return Job(config, environments, deployment).run()


def game_stage_config(config: ml_collections.ConfigDict) -> ml_collections.ConfigDict:
    """The main job's tic-tac-toe stage (`config.game`): a job of its own under
    RUN_DIR/tictactoe, with the main job's warm-start cache."""
    game = mutable_copy(config.game)
    game.run_dir = str(pathlib.Path(config.run_dir) / GAME_STAGE_DIR)
    game.sft.cache_dir = config.sft.cache_dir
    return game
