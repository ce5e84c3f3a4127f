"""serving/agent_rollouts.py end to end: the RL pipeline trained on DB episodes that the example
agent (examples/openai_agent/agent.py, its own processes, the real `openai` client) plays over
loopback HTTP through the server and the task gateway, on the pipeline's own engine.

The truth of what was sampled is the engine's: every turn it generates is recorded beside the
server (`Recorder`), and the batches trained must hold exactly those tokens."""

from __future__ import annotations

import asyncio
import pathlib

import numpy as np
import pytest

from agentrl_jax.episode import SampleStatus
from agentrl_jax.pipeline import curriculum, runner
from agentrl_jax.rl import advantages
from agentrl_jax.rollout.agent_loop import AgentSpec, EpisodeLimits
from agentrl_jax.rollout.cross_policy import TRAINED_POLICY, PolicyMix
from agentrl_jax.sampling import SamplingParams
from agentrl_jax.serving import agent_rollouts
from environments.db.task import DBTask
from tests.support.controller_fleet import ThreadFleet
from tests.support.pipeline_stack import make_stack

REPO = pathlib.Path(__file__).resolve().parents[2]
STEPS, SIZE, CONTEXT = 2, 2, 1024


class Recorder:
    """The engine as the server uses it, keeping each session's requests and results."""

    def __init__(self, engine):
        self.engine = engine
        self.turns: dict[str, list] = {}

    async def generate(self, request, on_tokens=None):
        result = await self.engine.generate(request, on_tokens)
        self.turns.setdefault(request.session_id, []).append((list(request.prompt), result))
        return result

    async def end_session(self, session_id):
        await self.engine.end_session(session_id)

    async def policies(self):
        return await self.engine.policies()


@pytest.fixture(scope="module")
def db_fleet():
    fleet = ThreadFleet()
    # Two rounds: the environment, not the agent (allowed three turns), ends every episode.
    fleet.add_worker(DBTask(split="train", train_size=8, max_rounds=2), concurrency=8)
    yield fleet
    fleet.close()


def _pipeline(tokenizer):
    pcfg = runner.default_config()
    pcfg.update(mode="async", steps=STEPS, groups_per_step=1, group_size=SIZE,
                rollout_workers=0, max_staleness=0, stale_policy_ratio=0.0)
    agent = AgentSpec(tokenizer=tokenizer,
                      sampling=SamplingParams(temperature=1.0, max_new_tokens=8),
                      limits=EpisodeLimits(max_turns=3, max_context_tokens=CONTEXT,
                                           max_new_tokens=8),
                      policy_mix=PolicyMix.single())
    stream = curriculum.task_stream({"db-train": list(range(8))}, pcfg.curriculum, seed=0)
    return pcfg, agent, stream


def _train(tokenizer, config, controller_url):
    """Runs the pipeline with `config`'s agent rollouts; (rollouts, reports, recorder, the
    engine's policy versions at the end)."""
    engine, trainer = make_stack(tokenizer, max_context=CONTEXT)
    recorder, reports = Recorder(engine), []

    async def go():
        pcfg, agent, stream = _pipeline(tokenizer)
        rollouts = agent_rollouts.source(config, engine=recorder, controller_url=controller_url,
                                         max_context=CONTEXT)(agent, pcfg)
        pipeline = runner.RLPipeline(pcfg, client=None, engine=engine, trainer=trainer,
                                     agent=agent, stream=stream,
                                     adv_config=advantages.default_config(),
                                     on_step=reports.append, sources=[rollouts])
        try:
            await pipeline.run(trainer.init_state(0))
        finally:
            versions = await engine.policies()
        return rollouts, versions

    with engine:
        rollouts, versions = asyncio.run(go())
    return rollouts, reports, recorder, versions


def test_an_agent_that_keeps_failing_stops_the_run(tokenizer):
    config = agent_rollouts.default_config()
    config.update(agents=2, max_failures_in_a_row=3,
                  command=("{python}", "-c", "import sys; sys.exit('no model here')"))
    with pytest.raises(RuntimeError, match="failed 3 times in a row.*no model here"):
        _train(tokenizer, config, "http://127.0.0.1:9/api")


@pytest.mark.slow  # ~3 min each here: the first train step compiles
@pytest.mark.parametrize("example", ["openai_agent", "langchain_agent", "openai_agents_sdk"])
def test_the_example_agent_trains_end_to_end(tokenizer, db_fleet, example):
    if example != "openai_agent":
        pytest.importorskip("langchain_openai")   # the `frameworks` extra
    config = agent_rollouts.default_config()
    config.update(agents=2, episode_timeout_s=300.0,
                  command=("{python}", str(REPO / "examples" / example / "agent.py")))
    rollouts, reports, recorder, versions = _train(tokenizer, config, db_fleet.url)
    assert [r.step for r in reports] == list(range(1, STEPS + 1))
    assert versions[TRAINED_POLICY] == STEPS  # the served weights changed version each step
    assert rollouts.episodes >= STEPS * SIZE and not rollouts.groups.rejected
    for k, report in enumerate(reports):
        assert np.isfinite(report.metrics["loss"]) and np.isfinite(report.metrics["grad_norm"])
        assert len(report.rollouts) == SIZE
        for rollout in report.rollouts:
            session = f"serving/{rollout.metrics['trajectory_id']}/{rollout.metrics['segment']}"
            turns = recorder.turns[session]
            sampled = rollout.loss_mask > 0
            # The stream trained is the last request's prompt and the tokens sampled for it...
            prompt, last = turns[-1]
            assert rollout.tokens.tolist() == prompt + list(last.tokens)
            # ...and its sampled tokens are every token the engine generated, in order, with
            # their behaviour log-probabilities, by the weights served at the time.
            assert rollout.tokens[sampled].tolist() == [t for _, r in turns for t in r.tokens]
            np.testing.assert_allclose(rollout.logprobs[sampled],
                                       [p for _, r in turns for p in r.logprobs], rtol=1e-6)
            assert set(rollout.versions[sampled].tolist()) == {k}
            # The outcome is the environment's: its round limit ended the episode.
            assert rollout.status == SampleStatus.TASK_LIMIT_REACHED and rollout.num_turns == 2
            assert rollout.task == "db-train" and rollout.index in range(8)
