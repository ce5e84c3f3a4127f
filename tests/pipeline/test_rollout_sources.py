"""One contract, three rollout sources (pipeline/rollout_source.py): the in-process agent loop,
sampling-worker processes through the rollout hub, and an agent program over the OpenAI server.

Each runs the real async pipeline for two steps on the echo fleet with nothing else playing,
through a pipeline that records what its sources do to it (`RecordingPipeline`), and must:
give every step whole groups of `group_size` members, each group one (task, index) of the
task stream, under group ids never used twice; stay within the staleness bound; and touch the
feed only between attach and detach.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import pathlib
import subprocess
import sys

import httpx
import numpy as np
import pytest

from agentrl_jax.controller.client import ControllerClient
from agentrl_jax.data import TaskStream
from agentrl_jax.pipeline import runner
from agentrl_jax.pipeline.rollout_hub import HubSettings, RolloutHub
from agentrl_jax.pipeline.sampling_worker import make_spec
from agentrl_jax.rl import advantages
from agentrl_jax.rollout.agent_loop import AgentSpec
from agentrl_jax.sampling import EngineConfig, SamplingParams
from agentrl_jax.serving import agent_rollouts
from tests.support.pipeline_stack import pipeline_configs

REPO = pathlib.Path(__file__).resolve().parents[2]
SOURCES = ("agent_loop", "hub", "openai_agent")
STEPS = 2


class RecordingPipeline(runner.RLPipeline):
    """The pipeline, noting each call its sources make on the feed and whether it ran."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.calls: list[tuple[str, bool]] = []   # (feed method, the async loop running)
        self.drawn: list[tuple[str, object]] = []

    def _note(self, name: str) -> None:
        self.calls.append((name, self._gate is not None))

    def draw(self):
        self._note("draw")
        drawn = super().draw()
        self.drawn.append(drawn)
        return drawn

    async def next_group(self):
        self._note("next_group")
        return await super().next_group()

    async def try_next_group(self):
        self._note("try_next_group")
        return await super().try_next_group()

    def deliver(self, rollout):
        self._note("deliver")
        super().deliver(rollout)

    def add_group(self, rollouts):
        self._note("add_group")
        return super().add_group(rollouts)


def _worker(hub_url: str, log_dir: pathlib.Path) -> subprocess.Popen:
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "HF_HUB_OFFLINE": "1"}
    with open(log_dir / "worker.log", "wb") as log:
        return subprocess.Popen(
            [sys.executable, "-m", "agentrl_jax.pipeline.sampling_worker", "--hub", hub_url,
             "--concurrency", "2", "--worker-id", "w"],
            env=env, stdout=log, stderr=subprocess.STDOUT)


@contextlib.asynccontextmanager
async def _hub(trainer, agent, fleet_url, group_size, log_dir):
    """A hub (served; with its URL) and one sampling-worker process claiming from it."""
    model_cfg = trainer.model(trainer.init_state(0).params).cfg
    spec = make_spec(model_cfg, "smollm2-135m-instruct", fleet_url,
                     EngineConfig(max_batch=8, page_size=16, num_pages=256, max_context=512,
                                  prefill_buckets=(256,), context_buckets=(512,),
                                  batch_buckets=(8,), steps_per_sync=4), agent)
    hub = RolloutHub.of(HubSettings(spec, lease_timeout_s=30.0), group_size)
    url = await hub.start()
    process = _worker(url, log_dir)
    try:
        yield hub, url
    finally:
        process.kill()
        process.wait()
        await hub.stop()
        print((log_dir / "worker.log").read_bytes()[-4096:].decode(errors="replace"))


@pytest.mark.parametrize("kind", SOURCES)
def test_every_rollout_source_keeps_the_feed_contract(kind, stack, fleet, tokenizer, tmp_path):
    engine, trainer = stack
    pcfg, agent = pipeline_configs(tokenizer, "async", steps=STEPS, max_staleness=0)
    pcfg.update(groups_per_step=1, rollout_workers=2 if kind == "agent_loop" else 0)
    reports: list[runner.StepReport] = []

    async def go():
        async with contextlib.AsyncExitStack() as stack_, \
                ControllerClient(fleet.url, start_jitter_s=0) as client:
            indices = await client.get_indices("echo")
            hub, url, sources = None, None, []
            if kind == "hub":
                hub, url = await stack_.enter_async_context(
                    _hub(trainer, agent, fleet.url, pcfg.group_size, tmp_path))
            elif kind == "openai_agent":
                config = agent_rollouts.default_config()
                config.update(agents=2, episode_timeout_s=300.0, command=(
                    "{python}", str(REPO / "examples" / "openai_agent" / "agent.py")))
                sources = [agent_rollouts.source(config, engine=engine,
                                                 controller_url=fleet.url,
                                                 max_context=512)(agent, pcfg)]
            pipeline = RecordingPipeline(
                pcfg, client=client, engine=engine, trainer=trainer, agent=agent,
                stream=TaskStream({"echo": indices}, seed=0),
                adv_config=advantages.default_config(), on_step=reports.append,
                sources=sources, hub=hub)
            await asyncio.wait_for(pipeline.run(trainer.init_state(0)), 600)
            ran = len(pipeline.calls)
            declined = None
            if hub is not None:   # detached: a claim now is declined by the hub itself
                async with httpx.AsyncClient(base_url=url) as http:
                    await http.post("/heartbeat", json={"worker_id": "late"})
                    declined = (await http.post("/claim", json={"worker_id": "late"})
                                ).status_code
            await asyncio.sleep(1.0)   # what a source left running would do meanwhile
            return pipeline, indices, ran, declined

    pipeline, indices, ran, declined = asyncio.run(go())
    assert [r.step for r in reports] == list(range(1, STEPS + 1))
    group_ids = []
    for report in reports:
        groups: dict[int, list] = {}
        for rollout in report.rollouts:
            groups.setdefault(rollout.group_id, []).append(rollout)
        assert len(groups) >= pcfg.groups_per_step
        for members in groups.values():
            assert sorted(r.member for r in members) == list(range(pcfg.group_size))
            assert len({(r.task, str(r.index)) for r in members}) == 1
            assert members[0].task == "echo" and members[0].index in indices
            # Within the bound: sampled by the weights of the step before, at the oldest.
            trained = [r.versions[r.loss_mask > 0] for r in members if r.trainable]
            if trained:
                assert np.concatenate(trained).min() >= report.step - 1 - pcfg.max_staleness
        group_ids += list(groups)
    assert len(group_ids) == len(set(group_ids))
    # Each group drawn from the pipeline's stream, and the feed touched only while it ran.
    assert len(pipeline.drawn) >= len(group_ids)
    assert all(running for _, running in pipeline.calls)
    assert len(pipeline.calls) == ran
    if kind == "hub":
        assert declined == 204


class _BrokenSource:
    """A source whose work dies once attached."""

    def __init__(self):
        self.detached = False

    async def attach(self, feed):
        asyncio.get_running_loop().call_soon(feed.fail, RuntimeError("the source broke"))

    async def detach(self):
        self.detached = True


def _bare_pipeline(mode="async", **kwargs):
    """A pipeline with no engine or trainer: weights are an empty tree."""
    pcfg = runner.default_config()
    pcfg.update(mode=mode, steps=2, group_size=2, groups_per_step=1)
    agent = AgentSpec(tokenizer=None, sampling=SamplingParams())
    return runner.RLPipeline(pcfg, client=None, engine=None, trainer=None, agent=agent,
                             stream=TaskStream({"t": [0, 1]}, seed=0),
                             adv_config=advantages.default_config(),
                             weights_fn=lambda state, version: {}, **kwargs)


def test_a_source_that_fails_stops_the_run_with_its_error_and_is_detached():
    source = _BrokenSource()
    with pytest.raises(RuntimeError, match="the source broke"):
        asyncio.run(_bare_pipeline(sources=[source]).run(state=None))
    assert source.detached


def test_a_pipeline_needs_a_source_and_sync_mode_plays_only_its_own():
    with pytest.raises(ValueError, match="needs a rollout source"):
        asyncio.run(_bare_pipeline().run(state=None))
    with pytest.raises(ValueError, match="sync mode plays its groups in process"):
        _bare_pipeline("sync", sources=[_BrokenSource()])


def test_a_source_of_another_group_size_is_refused_when_the_run_starts():
    hub = RolloutHub.of(HubSettings(spec={}), group_size=4)   # its workers play groups of 4
    with pytest.raises(ValueError, match="the hub plays groups of 4, the pipeline's are 2"):
        asyncio.run(_bare_pipeline(sources=[hub]).run(state=None))
