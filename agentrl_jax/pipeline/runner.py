"""The RL pipeline: rollout sources and the trainer, asynchronous or synchronous.

Asynchronous (AgentRL): rollout sources (`pipeline.rollout_source`) keep starting groups —
each one (task, index) draw played G times — as long as the staleness gate admits them;
finished groups go to the buffer; the trainer takes every complete group each step (at least
`groups_per_step`), computes advantages, steps in a worker thread (the event loop, hence the
environments and the sampler, keep going), then syncs weights to the samplers. Generation never
waits for training except at the staleness bound, and training never waits for the slowest
episode.

The sources: the pipeline's own agent loop on its engine (`rollout_workers` coroutines), and
whatever the caller passes (`sources`): a `RolloutHub` of sampling workers in other processes
or on other hosts (`pipeline.sampling_worker`), which is also published each weight version,
or the agents of `serving.agent_rollouts`. Each is attached when the loop starts and detached
when it ends; the pipeline is their `GroupFeed`.

The trainer given may be a `pipeline.trainer_driver.TrainerDriver` (what `experiment.rl_stage`
passes): on several hosts its steps are made by every process, and `weights_fn` (its `weights`)
gathers each new version's parameters for the samplers.

Groups played elsewhere are filed whole (`add_group`): the OpenAI server's trajectories
(`serving.groups` forms them into groups) are trained exactly as the pipeline's own groups.

Synchronous (the baseline): each step draws `groups_per_step` groups, plays them all to the
end, trains, syncs; nothing overlaps.

Dynamic sampling (`dynamic_sampling`, DAPO's): a group whose shaped rewards are all equal has
zero GRPO advantage, so it is discarded rather than trained, its admission is given back and
another group is drawn, until the step holds `groups_per_step` groups with reward variance or
has drawn `max_draws_per_step` groups; then it trains on the groups with variance it has
(none: the step is skipped). `groups_drawn` and `groups_discarded_no_variance` are logged per
step. The episode statistics of a step (success, reward, how episodes ended, per task) are
over every group it drew, discarded or not, so they describe the policy, not the selection.
Every drawn group's outcomes also go to the stream (`observe`), for `pipeline.curriculum`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import random
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import ml_collections

from agentrl_jax import episode, stage_clock
from agentrl_jax.controller.client import ControllerClient
from agentrl_jax.data import TaskStream
from agentrl_jax.pipeline import curriculum
from agentrl_jax.pipeline.admission import StalenessGate
from agentrl_jax.pipeline.batching import has_reward_variance, prepare_batch, rollout_metrics
from agentrl_jax.pipeline.buffer import TrajectoryBuffer
from agentrl_jax.pipeline.rollout_hub import RolloutHub
from agentrl_jax.pipeline.rollout_source import AgentLoopSource, Claim, RolloutSource
from agentrl_jax.pipeline.trainer_driver import TrainerDriver
from agentrl_jax.pipeline.weight_sync import snapshot, sync_weights, weights_nbytes
from agentrl_jax.rl.train_step import Trainer, TrainState
from agentrl_jax.rollout.agent_loop import AgentSpec
from agentrl_jax.rollout.cross_policy import STALE_POLICY
from agentrl_jax.rollout.record import Rollout
from agentrl_jax.sampling.async_engine import AsyncSamplingEngine
from agentrl_jax.sampling.engine import prefill_window

log = logging.getLogger(__name__)

StepCallback = Callable[["StepReport"], Awaitable[None] | None]
ProgressCallback = Callable[["StepProgress"], None]
# A step's phases, in order (`StepProgress.phase`).
STEP_PHASES = ("rollouts", "training", "syncing")
ROLLOUTS, TRAINING, SYNCING = STEP_PHASES


def default_config() -> ml_collections.ConfigDict:
    return ml_collections.ConfigDict(dict(
        mode="async",  # or "sync"
        steps=100,
        groups_per_step=8,  # prompts per step (AgentRL: 256): the trainer waits for this many
        # None: take every complete group (AgentRL drains the buffer each step).
        max_groups_per_step=ml_collections.config_dict.placeholder(int),
        group_size=8,  # samples per prompt (G)
        rollout_workers=16,  # groups in flight at once
        max_staleness=2,  # versions generation may run ahead; older groups are dropped
        stale_policy_ratio=0.25,  # share of turns sampled by the stale snapshot
        stale_every=25,  # steps between stale snapshot refreshes
        # Discard groups without reward variance and draw others (see the module docstring),
        # at most `max_draws_per_step` groups drawn for one step.
        dynamic_sampling=False,
        max_draws_per_step=64,
        curriculum=curriculum.default_config(),  # `pipeline.curriculum`; off
        seed=0,
    ))


@dataclasses.dataclass
class _StepDraws:
    """The groups one step has drawn: those it trains and how many it discarded."""

    kept: list[list[Rollout]] = dataclasses.field(default_factory=list)
    drawn: list[list[Rollout]] = dataclasses.field(default_factory=list)

    @property
    def discarded(self) -> int:
        return len(self.drawn) - len(self.kept)


@dataclasses.dataclass
class StepReport:
    """What a step leaves for metrics, checkpoints and progress bars."""

    step: int  # optimizer steps done (== the new weight version)
    state: TrainState
    metrics: dict[str, float]
    rollouts: list[Rollout]
    bookkeeping: dict[str, Any]


@dataclasses.dataclass(frozen=True)
class StepProgress:
    """Where the step in progress stands, for a progress bar: a step on a CPU takes minutes,
    and without this a user cannot tell rollouts from training.

    `episodes`: episodes finished since the previous step's update (by any worker, for this
    step or, run ahead, the next). `drawn`/`kept`: groups this step has taken from the buffer
    and kept for training (under dynamic sampling, those with reward variance). `phase`:
    "rollouts" until the step has its groups, then "training", then "syncing" the weights.
    """

    step: int
    phase: str = ROLLOUTS
    episodes: int = 0
    drawn: int = 0
    kept: int = 0


class RLPipeline:
    """Owns one run's loop; everything it needs is built by the launcher and passed in."""

    def __init__(
        self,
        config: ml_collections.ConfigDict,
        *,
        client: ControllerClient,
        engine: AsyncSamplingEngine | None,
        trainer: Trainer | TrainerDriver,
        agent: AgentSpec,
        stream: TaskStream | curriculum.LearnabilityCurriculum,
        adv_config: ml_collections.ConfigDict,
        on_step: StepCallback | None = None,
        on_progress: ProgressCallback | None = None,
        bookkeeping: dict[str, Any] | None = None,
        sources: Sequence[RolloutSource] = (),
        hub: RolloutHub | None = None,
        weights_fn: Callable[[TrainState, int], Any] | None = None,
    ):
        """`engine`: the in-process sampler (None: every group comes from `sources`), on which
        `config.rollout_workers` agent-loop workers play. `sources`: further rollout sources,
        attached while the async loop runs. `hub`: the rollout hub of out-of-process
        samplers, a source too, which is also published each weight version (its HTTP server
        is the caller's to start and stop).
        `on_progress`: called with a `StepProgress` as episodes finish and the step moves
        from rollouts to training and syncing (from the event loop; keep it quick).
        `weights_fn(state, version)`: the sampler-layout weights of a state, to be served as
        weight `version` (run in a worker thread);
        default a device copy (`weight_sync.snapshot`)."""
        self.config = config
        self.client, self.engine, self.trainer = client, engine, trainer
        self.agent, self.stream, self.adv_config = agent, stream, adv_config
        self.on_step = on_step
        self.on_progress = on_progress
        self._progress = StepProgress(step=0)
        self.weights_fn = weights_fn
        book = bookkeeping or {}
        # Group ids and counters continue across a resume, so no two groups ever share an id.
        self._next_group_id = int(book.get("next_group_id", 0))
        self._rollouts_trained = int(book.get("rollouts_trained", 0))
        self._rng = random.Random(config.seed + int(book.get("next_group_id", 0)))
        self.buffer = TrajectoryBuffer(config.group_size, config.max_staleness,
                                       policy_mix=agent.policy_mix)
        self._gate: StalenessGate | None = None   # the async loop's, while it runs
        self._failure: asyncio.Future | None = None   # a source's `fail`, while it runs
        self.agent_loop = None if engine is None else AgentLoopSource(
            client, engine, agent, config.rollout_workers, self._rng)
        self.hub = hub
        own = [self.agent_loop] if self.agent_loop is not None and config.rollout_workers else []
        self.sources: list[RolloutSource] = [*own, *([hub] if hub else []), *sources]
        if config.mode == "sync" and (hub is not None or sources):
            raise ValueError("sync mode plays its groups in process: rollout sources and a hub "
                             "need the async pipeline")
        self._sampler_totals: dict[str, float] = {}

    # ---- rollouts: the pipeline as its sources' `GroupFeed` --------------------------------

    @property
    def group_size(self) -> int:
        return int(self.config.group_size)

    def draw(self) -> tuple[str, Any]:
        return next(self.stream)

    def _open_group(self) -> Claim:
        """Draws the next (task, index) and opens its group in the buffer."""
        task, index = self.draw()
        group_id = self._next_group_id
        self._next_group_id += 1
        self.buffer.open_group(group_id, task)
        return group_id, task, index

    async def next_group(self) -> Claim:
        """A group admitted by the async loop's staleness gate (waits for it)."""
        if self._gate is None:
            raise RuntimeError("groups are claimed only while the async loop runs")
        await self._gate.admit()
        return self._open_group()

    async def try_next_group(self) -> Claim | None:
        """A group if the async loop's staleness gate admits one now (none outside it: in
        sync mode, or before and after a run)."""
        if self._gate is None or await self._gate.try_admit() is None:
            return None
        return self._open_group()

    def add_group(self, rollouts: Sequence[Rollout]) -> int:
        """Admits a whole group played outside the pipeline (the OpenAI server's trajectories,
        `serving.groups`); returns the group id it is trained under.

        Its members take a fresh group id from the counter of the pipeline's own groups (so no
        two groups share one, across a resume too) and member numbers 0..n-1 in the order
        given; task, index, tokens, rewards and statuses are kept. From the buffer on it is any
        group: taken at the next step, dropped when staler than `max_staleness` (measured on
        its `TRAINED_POLICY` tokens), its advantages computed with the others. While the async
        loop runs it counts as a started group of the staleness gate without waiting (it was
        already played), so served and in-process generation share one bound, and a discarded
        served group gives its admission back as the pipeline's own do.
        """
        if not rollouts:
            raise ValueError("an external group needs at least one rollout")
        group_id = self._next_group_id
        self._next_group_id += 1
        self.buffer.open_group(group_id, rollouts[0].task, size=len(rollouts))
        if self._gate is not None:
            self._gate.count_started()
        for member, rollout in enumerate(rollouts):
            self.deliver(dataclasses.replace(rollout, group_id=group_id, member=member))
        return group_id

    def deliver(self, rollout: Rollout) -> None:
        """A finished episode, from any source, into the buffer (and the step's progress)."""
        self.buffer.add(rollout)
        self._report_progress(episodes=self._progress.episodes + 1)

    async def wait_for_admission(self, pending: Callable[[], int]) -> None:
        """For a source that files whole groups (`serving.agent_rollouts`) and paces itself by
        the async loop's staleness bound: returns once a group it started now would be
        admitted, counting the `pending()` groups it has started that have not arrived yet
        through `add_group` (which counts each as it arrives). Returns at once outside the
        async loop."""
        if self._gate is not None:
            await self._gate.wait_open(pending)

    def fail(self, error: BaseException) -> None:
        """A source cannot go on: the async loop raises `error` rather than wait for it."""
        if self._failure is not None and not self._failure.done():
            self._failure.set_exception(error)

    def _report_progress(self, **changes: Any) -> None:
        self._set_progress(dataclasses.replace(self._progress, **changes))

    def _set_progress(self, progress: StepProgress) -> None:
        self._progress = progress
        if self.on_progress is not None:
            self.on_progress(progress)

    # ---- training -------------------------------------------------------------------------

    def _select(self, taken: list[list[Rollout]], draws: _StepDraws) -> None:
        """Adds groups taken from the buffer to the step: kept, or (dynamic sampling, no reward
        variance) discarded; every one is observed by the stream."""
        for group in taken:
            draws.drawn.append(group)
            counted = [r for r in group if r.trainable]
            passes = [episode.is_success(r.status, r.reward) for r in counted]
            self.stream.observe(group[0].task, group[0].index, passes)
            if not self.config.dynamic_sampling or has_reward_variance(group, self.adv_config):
                draws.kept.append(group)
        self._report_progress(drawn=len(draws.drawn), kept=len(draws.kept))

    def _draws_left(self, draws: _StepDraws) -> int | None:
        """Groups this step may still draw (None: no bound, without dynamic sampling)."""
        if not self.config.dynamic_sampling:
            return None
        return max(0, self.config.max_draws_per_step - len(draws.drawn))

    async def _train_on(self, draws: _StepDraws, state: TrainState, version: int):
        cfg = self.trainer.config
        # Completion order depends on timing; group order must not (it decides the packing,
        # hence the float summation order of the gradient).
        groups = sorted(draws.kept, key=lambda g: g[0].group_id)
        batch = prepare_batch(groups, self.adv_config, cfg.seq_buckets, cfg.tokens_per_micro,
                              row_multiple=self.trainer.row_multiple)
        rollouts = [r for g in groups for r in g]
        drawn = {"groups_drawn": float(len(draws.drawn)),
                 "groups_discarded_no_variance": float(draws.discarded)}
        if draws.drawn:
            drawn.update(rollout_metrics([r for g in draws.drawn for r in g]))
        if batch is None:
            return state, {"skipped_step": 1.0, **drawn}, rollouts
        self._report_progress(phase=TRAINING)
        state, metrics = await asyncio.to_thread(
            self.trainer.step, state, batch.micro_batches, batch.num_loss_tokens)
        self._rollouts_trained += batch.num_rollouts
        return state, {**batch.metrics, **drawn, "num_rollouts_trained": batch.num_rollouts,
                       **metrics}, rollouts

    async def _finish_step(self, state, version, metrics, rollouts, started, gate=None):
        self._report_progress(phase=SYNCING)
        updated, sync_bytes = await self._sync_weights(state, version, self._stale_every())
        if gate is not None:  # only now: groups admitted next start on the new weights
            await gate.advance(version)
        metrics = {**metrics, **await self._sampler_metrics(), **self.buffer.report_metrics(),
                   "step_seconds": time.perf_counter() - started,
                   "stale_refreshed": float(STALE_POLICY in updated),
                   "sync_bytes": float(sync_bytes)}
        report = StepReport(version, state, metrics, rollouts, self.bookkeeping())
        if self.on_step is not None:
            result = self.on_step(report)
            if asyncio.iscoroutine(result):
                await result
        if version < self.config.steps:
            self._start_step(version + 1)

    async def _sampler_metrics(self) -> dict[str, float]:
        """The in-process sampler's prefill work and prefix-cache use over the step."""
        if self.engine is None:
            return {}
        totals = await self.engine.prefill_stats()
        window = prefill_window(self._sampler_totals, totals)
        self._sampler_totals = totals
        return {f"sampler_{k}": v for k, v in window.items()}

    async def _sync_weights(self, state: TrainState, version: int,
                            stale_every: int | None) -> tuple[list[str], int]:
        """The policies updated and the bytes of the one update they all received (the
        sampler-layout weights, or with LoRA the adapters: the `sync_bytes` metric)."""
        with stage_clock.span("transfer"):
            if self.weights_fn is not None:
                weights = await asyncio.to_thread(self.weights_fn, state, version)
            else:
                weights = snapshot(self.trainer, state)
            updated = await sync_weights(self.engine, self.trainer, state, version,
                                         stale_every=stale_every, hub=self.hub, weights=weights)
        return updated, weights_nbytes(weights)

    def _start_step(self, step: int) -> None:
        self._set_progress(StepProgress(step))

    def _stale_every(self) -> int | None:
        return self.config.stale_every if self.config.stale_policy_ratio > 0 else None

    def bookkeeping(self) -> dict[str, Any]:
        """The pipeline's part of a checkpoint (the data stream's state is saved beside it)."""
        return {
            "next_group_id": self._next_group_id,
            "rollouts_trained": self._rollouts_trained,
            "stream_state": self.stream.get_state(),
        }

    # ---- the loops -------------------------------------------------------------------------

    async def run(self, state: TrainState, start_step: int = 0) -> TrainState:
        """Trains from `start_step` (the current weight version) to `config.steps`."""
        await self._sync_weights(state, start_step, 1 if self._stale_every() else None)
        if self.engine is not None:  # steps report their own sampling, not earlier stages'
            self._sampler_totals = await self.engine.prefill_stats()
        self._start_step(start_step + 1)
        if self.config.mode == "sync":
            return await self._run_sync(state, start_step)
        if self.config.mode != "async":
            raise ValueError(f"pipeline mode must be 'async' or 'sync', not {self.config.mode!r}")
        return await self._run_async(state, start_step)

    async def _run_async(self, state: TrainState, start_step: int) -> TrainState:
        cfg = self.config
        if not self.sources:
            raise ValueError("async mode needs a rollout source: rollout_workers > 0 with an "
                             "engine, a hub, or sources")
        gate = StalenessGate(cfg.groups_per_step, cfg.max_staleness,
                             started_groups=start_step * cfg.groups_per_step, version=start_step)
        self._gate, self._failure = gate, asyncio.get_running_loop().create_future()
        attached: list[RolloutSource] = []
        try:
            for source in self.sources:
                await source.attach(self)
                attached.append(source)
            for version in range(start_step + 1, cfg.steps + 1):
                started = time.perf_counter()
                draws = await self._collect(version - 1, gate)
                state, metrics, rollouts = await self._train_on(draws, state, version)
                await self._finish_step(state, version, metrics, rollouts, started, gate)
        finally:
            for source in reversed(attached):
                await source.detach()
            self._gate = None
            if self._failure.done():
                self._failure.exception()   # retrieved: raised already, or not needed
            self._failure = None
        return state

    async def _run_sync(self, state: TrainState, start_step: int) -> TrainState:
        cfg = self.config
        for version in range(start_step + 1, cfg.steps + 1):
            started = time.perf_counter()
            if self.engine is None:
                raise ValueError("sync mode plays groups in process: it needs an engine")
            draws, opened = _StepDraws(), 0
            while True:   # one round, or (dynamic sampling) until enough have variance
                count = cfg.groups_per_step - len(draws.kept)
                if cfg.dynamic_sampling:   # bounded by groups opened: failed ones count too
                    count = min(count, cfg.max_draws_per_step - opened)
                if count <= 0:
                    break
                groups = [self._open_group() for _ in range(count)]
                opened += count
                assert self.agent_loop is not None
                async with asyncio.TaskGroup() as playing:  # waits for all, even cancelled
                    for group in groups:
                        playing.create_task(self.agent_loop.play(self, group))
                self._select(self.buffer.take(current_version=version - 1).groups, draws)
                if not cfg.dynamic_sampling:
                    break
            state, metrics, rollouts = await self._train_on(draws, state, version)
            await self._finish_step(state, version, metrics, rollouts, started)
        return state

    async def _collect(self, current_version: int, gate: StalenessGate) -> _StepDraws:
        """At least `groups_per_step` trainable groups (all ready ones unless capped), or under
        dynamic sampling that many with reward variance, or all it has at the draw bound.

        Groups discarded (stale, all members failed, no reward variance) give their admission
        back to the gate, so replacements start and the trainer never waits on groups that
        cannot come.
        """
        cfg = self.config
        draws = _StepDraws()
        while len(draws.kept) < cfg.groups_per_step:
            left = self._draws_left(draws)
            if left == 0:
                break
            await self._wait_or_raise(self.buffer.wait_for(cfg.groups_per_step
                                                           - len(draws.kept)))
            caps = [c for c in (left, None if cfg.max_groups_per_step is None
                                else cfg.max_groups_per_step - len(draws.kept)) if c is not None]
            without_variance = draws.discarded
            taken = self.buffer.take(current_version, max_groups=min(caps, default=None))
            self._select(taken.groups, draws)
            await gate.release(taken.discarded + draws.discarded - without_variance)
        return draws

    async def _wait_or_raise(self, waiting: Awaitable) -> None:
        """Awaits `waiting`, but raises what a source reported (`fail`) instead of hanging."""
        if self._failure is None:   # outside the async loop: no source is attached
            await waiting
            return
        wait_task = asyncio.ensure_future(waiting)
        await asyncio.wait([wait_task, self._failure], return_when=asyncio.FIRST_COMPLETED)
        if not wait_task.done():
            wait_task.cancel()
            self._failure.result()  # raises the source's error
        wait_task.result()
