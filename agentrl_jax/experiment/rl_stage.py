"""The RL stage of a run: build the engine, trainer and pipeline; checkpoint; resume.

State lives in `run_dir/checkpoints` (Orbax): the train state plus the pipeline's bookkeeping,
which holds the task stream's position (with `pipeline.curriculum`, also its pass rates) and
the next group id. Resuming restores both, so a
restarted run continues the same draw sequence after the last checkpointed step: groups that
were in flight when the process died are never trained (their draws are skipped, not
replayed), and no group id is used twice. Metric records of the lost steps are dropped.

`run_dir` may be a bucket URL (a string: `gs://bucket/run`); the checkpoints go beneath it. The
trainer is driven through a `pipeline.trainer_driver.TrainerDriver`: on one host this process's
own, on several a `MultiHostDriver` whose every train step, weight gather and checkpoint save
all processes make (the leader runs `run_rl`, the others `follow_rl`; both set up through the
same `open_training`).
"""

from __future__ import annotations

import dataclasses
import logging
import os
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

import ml_collections
from jax.sharding import Mesh

from agentrl_jax.controller.client import ControllerClient
from agentrl_jax.dataclass_config import config_dict_from, dataclass_from
from agentrl_jax.experiment.metrics import MetricsLog
from agentrl_jax.experiment.policy import Policy
from agentrl_jax.models import lora
from agentrl_jax.models.decoder import Decoder
from agentrl_jax.pipeline import curriculum, runner
from agentrl_jax.pipeline.rollout_hub import HubSettings, RolloutHub
from agentrl_jax.pipeline.rollout_source import RolloutSource
from agentrl_jax.pipeline.sampling_worker import adapter_spec
from agentrl_jax.pipeline.trainer_driver import (
    MultiHostDriver,
    OnWeights,
    TrainerDriver,
    Training,
    open_training,
)
from agentrl_jax.rl import advantages, train_step
from agentrl_jax.rollout.agent_loop import AgentSpec, EpisodeLimits
from agentrl_jax.rollout.cross_policy import PolicyMix
from agentrl_jax.sampling import AsyncSamplingEngine, EngineConfig, SamplingEngine, SamplingParams
from agentrl_jax.sampling.adapter_engine import AdapterSamplingEngine

log = logging.getLogger(__name__)

DriverFactory = Callable[[Training], TrainerDriver]
# (the agent side of episodes, the pipeline's config) -> the source that plays every group.
SourceFactory = Callable[[AgentSpec, ml_collections.ConfigDict], RolloutSource]


def default_config() -> ml_collections.ConfigDict:
    """AgentRL's settings where they apply (temperature 0.8, G=8, lr 1e-6, −0.2 penalty).

    `limits` and `engine` are `EpisodeLimits` and `EngineConfig` as ConfigDicts: their fields
    and defaults are the dataclasses'. The engine's defaults size a small direct use, so an RL
    job overrides what its episodes (AgentRL's, `EpisodeLimits`) need: a context that holds
    the longest episode, and a pool and prefill buckets to match.
    """
    limits = EpisodeLimits()
    return ml_collections.ConfigDict(dict(
        pipeline=runner.default_config(),
        trainer=train_step.default_config(),
        advantages=advantages.default_config(),
        sampling=dict(temperature=0.8, top_p=1.0, top_k=0),
        limits=config_dict_from(limits),
        engine=config_dict_from(EngineConfig, num_pages=4096,
                                max_context=limits.max_context_tokens,
                                prefill_buckets=(128, 512, 2048),
                                context_buckets=(1024, 2048, 4096)),
        # A checkpoint every `every` steps and at the last; the latest `keep` stay, and every
        # multiple of `keep_period` (0: none; `eval.select_every` sets it, selection.py).
        checkpoint=dict(every=10, keep=2, keep_period=0),
        # The tasks RL draws episodes from (their train splits); empty: every task the
        # environments serve. Evaluation covers every served task either way.
        tasks=(),
    ))


def trained_tasks(config: ml_collections.ConfigDict, served: Sequence[str]) -> list[str]:
    """The tasks of `served` that RL trains on (`config.tasks`, in `served`'s order).

    Raises ValueError on a task that is not served: a typo would otherwise train on nothing.
    """
    chosen = tuple(config.get("tasks") or ())
    unknown = sorted(set(chosen) - set(served))
    if unknown:
        raise ValueError(f"rl.tasks {unknown} are not among the served tasks {list(served)}")
    return [t for t in served if not chosen or t in chosen]


def agent_spec(config: ml_collections.ConfigDict, policy: Policy, stale_ratio: float = 0.0,
               sampling: ml_collections.ConfigDict | None = None) -> AgentSpec:
    """The agent side of episodes: sampling settings (`sampling`, default `config.sampling`),
    limits, policy mix, chat format."""
    limits = dataclass_from(config.limits, EpisodeLimits)
    sampling = SamplingParams(max_new_tokens=limits.max_new_tokens,
                              **(config.sampling if sampling is None else sampling).to_dict())
    return AgentSpec(tokenizer=policy.tokenizer, sampling=sampling, limits=limits,
                     policy_mix=PolicyMix.current_and_stale(stale_ratio), parser=policy.parser,
                     end_of_turn_ids=policy.end_of_turn_ids)


def check_context_fits_training(config: ml_collections.ConfigDict) -> None:
    """Raises ValueError unless an episode at the context limit fits a training row.

    Episodes are trained up to their last sampled token, at most `limits.max_context_tokens`
    tokens, i.e. that many minus one inputs; found out at the first long episode otherwise.
    """
    longest, limit = max(config.trainer.seq_buckets), int(config.limits.max_context_tokens)
    if limit - 1 > longest:
        raise ValueError(
            f"limits.max_context_tokens={limit} does not fit the largest training bucket "
            f"trainer.seq_buckets={tuple(config.trainer.seq_buckets)}: add a bucket of at least "
            f"{limit - 1} or lower the limit")


def make_engine(config: ml_collections.ConfigDict, policy: Policy,
                mesh: Mesh | None = None) -> AsyncSamplingEngine:
    engine_cfg = dataclass_from(config.engine, EngineConfig)
    trainer_cfg = config.get("trainer")
    if trainer_cfg is None or train_step.lora_of(trainer_cfg) is None:
        return AsyncSamplingEngine(SamplingEngine(policy.model, engine_cfg,
                                                  mesh=mesh))
    # LoRA: the engine serves adapters over one kept base; syncs carry adapters alone.
    model = train_step.with_trainer_adapters(policy.model, trainer_cfg)
    return AdapterSamplingEngine(SamplingEngine(model, engine_cfg, mesh=mesh),
                                 model, mesh=mesh)


@dataclasses.dataclass
class RLResult:
    state: train_step.TrainState
    driver: TrainerDriver  # `done()` once this process's evaluation and export are over
    resumed_from: int | None
    hub: RolloutHub | None = None  # the out-of-process samplers' hub (stopped), when remote


def checkpoint_dir(run_dir: str | os.PathLike) -> str:
    """`run_dir/checkpoints`, joined as a string so that a bucket URL keeps its `//`."""
    return os.path.join(os.fspath(run_dir), "checkpoints")


async def run_rl(
    config: ml_collections.ConfigDict,
    *,
    policy: Policy,
    engine: AsyncSamplingEngine,
    trainer_mesh: Mesh,
    client: ControllerClient,
    task_indices: Mapping[str, Sequence[Any]],
    run_dir: str | os.PathLike,
    metrics: MetricsLog,
    on_step: Callable[[runner.StepReport], None] | None = None,
    on_progress: runner.ProgressCallback | None = None,
    reference: Decoder | None = None,
    make_driver: DriverFactory = TrainerDriver,
    remote: HubSettings | None = None,
    start_hub: Callable[[RolloutHub], Awaitable[None]] | None = None,
    probe: Callable[[int, Decoder], Mapping[str, float]] | None = None,
    rollouts: SourceFactory | None = None,
) -> RLResult:
    """Trains `policy` to `config.pipeline.steps`, resuming from `run_dir/checkpoints`.

    `reference`: the frozen model of the KL term (`trainer.loss.kl_coef`). `make_driver`: the
    `TrainerDriver` over the opened training (default this process alone; on several hosts
    `MultiHostDriver`, whose followers run `follow_rl`). `remote`: serve out-of-process
    samplers (the followers' own, on several hosts) through the pipeline's rollout hub, which
    `start_hub(hub)` starts (and tells them of) before the first step; it is stopped at the end
    and handed out in the result. `probe(step, model)`: figures of the policy measured at every
    checkpoint (the copy probe, `evaluation/copy_probe.py`), logged under "rl_probe".
    `rollouts(agent, pipeline config)`: a rollout source beside the pipeline's own agent-loop
    workers (`pipeline.rollout_workers`, which may be 0), e.g. `serving.agent_rollouts.source`;
    the pipeline's engine is synced each version, for whatever samples on it.
    """
    check_context_fits_training(config)
    pcfg = config.pipeline
    stream = curriculum.task_stream(task_indices, pcfg.curriculum, pcfg.seed)
    every = int(config.checkpoint.every)
    with open_training(config, model=policy.model, trainer_mesh=trainer_mesh,
                       checkpoint_dir=checkpoint_dir(run_dir), reference=reference) as training:
        driver = make_driver(training)
        start, book = training.start, training.bookkeeping
        if start is not None:
            assert book is not None, "a restored checkpoint carries its bookkeeping"
            stream.set_state(book["stream_state"])
            dropped = metrics.truncate("rl", start)
            metrics.truncate("rl_probe", start)
            log.info("resumed RL from step %d (dropped %d records of lost steps)", start, dropped)

        def checkpoint_and_log(report: runner.StepReport) -> None:
            trained = sorted({r.group_id for r in report.rollouts})
            metrics.write("rl", report.step, {**report.metrics, "groups_trained": trained})
            if report.step % every == 0 or report.step == pcfg.steps:
                driver.save(report.step, report.state, bookkeeping=report.bookkeeping)
                if probe is not None:
                    model = lora.merged(driver.model(report.state.params))
                    metrics.write("rl_probe", report.step, dict(probe(report.step, model)))
            if on_step is not None:
                on_step(report)

        if remote is not None and training.trainer.lora is not None and (
                "adapters" not in remote.spec):
            # The adapters' base is known only now, with the trainer (its fingerprint); workers
            # load it from the spec's model source (the directory its tokenizer comes from).
            remote = dataclasses.replace(remote, spec={**remote.spec, "adapters": adapter_spec(
                training.trainer, remote.spec["tokenizer"])})
        agent = agent_spec(config, policy, pcfg.stale_policy_ratio)
        hub = None if remote is None else RolloutHub.of(remote, pcfg.group_size)
        sources = [] if rollouts is None else [rollouts(agent, pcfg)]
        pipeline = runner.RLPipeline(
            pcfg, client=client, engine=engine, trainer=driver, agent=agent, stream=stream,
            adv_config=config.advantages, on_step=checkpoint_and_log, on_progress=on_progress,
            bookkeeping=book, sources=sources, hub=hub, weights_fn=driver.weights)
        try:
            if hub is not None and start_hub is not None:
                await start_hub(hub)
            state = await pipeline.run(training.state, start_step=start or 0)
        finally:
            if hub is not None:
                await hub.stop()
        params = driver.finish(state)
    # The trained weights back into the policy's model, for evaluation and export.
    from flax import nnx

    nnx.update(policy.model, nnx.state(lora.merged(driver.model(params))))
    return RLResult(state, driver, start, hub)


def follow_rl(
    config: ml_collections.ConfigDict,
    *,
    model: Decoder,
    trainer_mesh: Mesh,
    run_dir: str | os.PathLike,
    make_driver: Callable[[Training], MultiHostDriver],
    reference: Decoder | None = None,
    sampler: Callable[[], OnWeights | None] | None = None,
) -> train_step.TrainState:
    """A follower's side of `run_rl` on several hosts: the same training set-up (so the same
    trainer-mesh calls in the same order), then the driver's `serve` until the leader is done.
    `sampler()`: starts the sampler on this process's chips once the trainer is set up (the
    leader's hub starts then) and returns what takes each gathered weight version
    (`MultiHostDriver.serve(on_weights=...)`). Returns this process's final state (its shards)."""
    check_context_fits_training(config)
    with open_training(config, model=model, trainer_mesh=trainer_mesh,
                       checkpoint_dir=checkpoint_dir(run_dir), reference=reference) as training:
        driver = make_driver(training)
        return driver.serve(training.state, None if sampler is None else sampler())
