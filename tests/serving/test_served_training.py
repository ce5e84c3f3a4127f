"""The RL pipeline trained on groups that an agent plays through the OpenAI server over HTTP:
the real `openai` client, the server on the pipeline's own engine, the real trainer."""

import asyncio

import httpx
import numpy as np
import pytest

from agentrl_jax.pipeline import curriculum, runner
from agentrl_jax.rl import advantages
from agentrl_jax.serving.groups import ServedGroups
from agentrl_jax.serving.service import ServerConfig, Service
from tests.serving.conftest import RunningServer, wait_until
from tests.support.pipeline_stack import make_stack, pipeline_configs

GROUPS, SIZE = 2, 2


@pytest.fixture(scope="module")
def served(tokenizer):
    """The tiny pipeline stack's engine behind a server that samples its trained policy."""
    engine, trainer = make_stack(tokenizer)
    eot = tokenizer.convert_tokens_to_ids("<|im_end|>")
    with engine:
        service = Service(engine, tokenizer, "hermes", (eot,),
                          ServerConfig(models={"tiny": "current"}, max_context=512))
        server = RunningServer(service)
        yield engine, trainer, service, server
        server.close()


def _weight_version(server) -> int:
    models = httpx.get(f"{server.url}/v1/models").json()["data"]
    return models[0]["agentrl"]["weight_version"]


def _agent(server, played):
    """Plays GROUPS groups of SIZE two-turn trajectories; group k waits for weight version k
    (the agent is told nothing: it reads what the server serves)."""
    client = server.client()
    for k in range(GROUPS):
        # A liveness bound (the first step compiles the train step), not a timing assertion.
        wait_until(lambda k=k: _weight_version(server) == k, timeout=900)
        for member in range(SIZE):
            trajectory = f"g{k}-m{member}"
            messages = [{"role": "user", "content": f"Count to {k + member + 2}."}]
            for turn in range(2):
                response = client.chat.completions.create(
                    model="tiny", messages=messages, max_tokens=6, temperature=1.0,
                    seed=10 * k + member + turn, extra_body={"trajectory_id": trajectory})
                messages += [response.choices[0].message.model_dump(exclude_none=True),
                             {"role": "user", "content": "Go on."}]
            ext = response.model_extra["agentrl"]
            choice = ext["choices"][0]
            played[trajectory] = (ext["prompt_token_ids"] + choice["completion_token_ids"],
                                  choice["weight_versions"])
            reward = httpx.post(f"{server.url}/v1/trajectories/{trajectory}/reward", json={
                "reward": float(member), "task": "count", "group_id": k, "member": member,
                "group_size": SIZE})
            assert reward.status_code == 200, reward.text


def test_pipeline_trains_on_groups_served_over_http(served, tokenizer):
    engine, trainer, service, server = served
    pcfg, agent = pipeline_configs(tokenizer, "async", steps=GROUPS, max_staleness=0)
    pcfg.update(groups_per_step=1, group_size=SIZE, rollout_workers=0)
    reports, played = [], {}

    async def go():
        groups = ServedGroups(default_size=pcfg.group_size)   # a source: served groups
        stream = curriculum.task_stream({"count": [0]}, pcfg.curriculum, seed=0)
        pipeline = runner.RLPipeline(
            pcfg, client=None, engine=engine, trainer=trainer, agent=agent, stream=stream,
            adv_config=advantages.default_config(), on_step=reports.append,
            sources=[groups])
        feeding = asyncio.create_task(groups.feed_from(service.trajectories.pop_finished, 0.01))
        playing = asyncio.create_task(asyncio.to_thread(_agent, server, played))
        training = asyncio.create_task(pipeline.run(trainer.init_state(0)))
        try:  # an agent that fails fails the test, rather than leave the trainer waiting
            await asyncio.wait({training, playing}, return_when=asyncio.FIRST_EXCEPTION)
            if playing.done() and playing.exception() is not None:
                training.cancel()
            await playing
            await training
        finally:
            feeding.cancel()
        return groups

    groups = asyncio.run(go())
    assert [r.step for r in reports] == [1, 2] and _weight_version(server) == GROUPS
    assert groups.submitted == GROUPS and not groups.rejected
    for k, report in enumerate(reports):
        assert np.isfinite(report.metrics["loss"]) and np.isfinite(report.metrics["grad_norm"])
        assert report.metrics["num_rollouts_trained"] == SIZE
        assert sorted(r.metrics["trajectory_id"] for r in report.rollouts) == [
            f"g{k}-m{m}" for m in range(SIZE)]
        for rollout in report.rollouts:
            tokens, versions = played[rollout.metrics["trajectory_id"]]
            # Trained token for token on the stream the server sampled...
            assert rollout.tokens.tolist() == tokens
            # ...by the weights served at the time, which each step replaced.
            assert set(versions) == {k}
            assert set(rollout.versions[rollout.loss_mask > 0].tolist()) == {k}


def test_reward_refuses_a_member_outside_its_declared_group(served):
    _, _, _, server = served
    response = httpx.post(f"{server.url}/v1/trajectories/nobody/reward",
                          json={"reward": 1.0, "member": 2, "group_size": 2})
    assert response.status_code == 400 and response.json()["error"]["param"] == "member"
