"""serving/task_gateway.py: an agent's episode through the gateway, over HTTP on loopback.

The real server (on the scripted engine of tests/serving/conftest.py, whose `tiny-agent` model
always calls get_weather(Paris)), the gateway mounted under it, a real controller and task
worker (threads), and the example agent's own code (examples/openai_agent/agent.py) or the
`openai` client and httpx doing what a dishonest agent would.
"""

from __future__ import annotations

import asyncio
import json

import httpx
import openai
import pytest

from agentrl_jax.controller.client import ControllerClient
from agentrl_jax.episode import SampleStatus
from agentrl_jax.serving.agent_rollouts import serve_in_loop
from agentrl_jax.serving.app import create_app
from agentrl_jax.serving.task_gateway import Job, TaskGateway, without_caller_rewards
from environments.worker.task import EpisodeResult, Task
from examples.openai_agent.agent import play
from launch.demo import WEATHER_TOOL
from tests.support.controller_fleet import ThreadFleet

QUESTION = "What is the weather in Paris?"


class WeatherTask(Task):
    """Sample i: answer after i + 1 get_weather calls; reward 1 if every call asks for Paris."""

    name = "weather"
    tools = [WEATHER_TOOL]
    concurrency = 16

    def indices(self):
        return list(range(4))

    async def episode(self, index, session):
        session.inject({"role": "user", "content": QUESTION})
        for turn_number in range(index + 1):
            calls = (await session.action()).tool_calls()
            if not calls or any((c.arguments or {}).get("city") != "Paris" for c in calls):
                return EpisodeResult(SampleStatus.COMPLETED, reward=0.0)
            if turn_number < index:
                for call in calls:
                    session.inject({"role": "tool", "tool_call_id": call.id,
                                    "content": "sunny, 21 C"})
        return EpisodeResult(SampleStatus.COMPLETED, reward=1.0, metrics={"graded": True})


@pytest.fixture(scope="module")
def fleet():
    fleet = ThreadFleet()
    fleet.add_worker(WeatherTask())
    yield fleet
    fleet.close()


class Scene:
    """A gateway and its server, serving in the running loop; sync clients run in threads."""

    def __init__(self, stack, fleet, url: str, gateway: TaskGateway):
        self.stack, self.fleet, self.url, self.gateway = stack, fleet, url, gateway
        self.loop = asyncio.get_running_loop()
        self.llm = openai.OpenAI(base_url=url + "/v1", api_key="none", max_retries=0,
                                 timeout=60)
        self.controller = httpx.Client(base_url=url + "/tasks/api", timeout=60)

    def job(self, index: int = 0, name: str = "t") -> Job:
        job = Job("weather", index, group_id=0, member=0, group_size=1, trajectory_id=name)
        self.gateway.add_job(job)
        return job

    def start(self, job: Job) -> tuple[dict, dict]:
        response = self.controller.post("/start_sample", json={"name": "weather",
                                                               "index": job.index},
                                        headers={"X-Trajectory-Id": job.trajectory_id})
        assert response.status_code == 200, response.text
        return {"session_id": response.headers["session_id"]}, response.json()

    def sample(self, job: Job, messages: list[dict]) -> dict:
        response = self.llm.chat.completions.create(
            model="tiny-agent", messages=messages, tools=[WEATHER_TOOL], max_tokens=40,
            extra_body={"trajectory_id": job.trajectory_id})
        return response.choices[0].message.model_dump(exclude_none=True)

    def interact(self, session: dict, message: dict) -> httpx.Response:
        return self.controller.post("/interact", json={"messages": [message]}, headers=session)

    def end_job(self, trajectory_id: str, why: str) -> None:
        """What the trainer does when an agent is done (in the server's loop)."""
        asyncio.run_coroutine_threadsafe(self.gateway.end_job(trajectory_id, why),
                                         self.loop).result(30)


def run(stack, fleet, scenario):
    """Runs `scenario(scene)` (sync, in a thread) beside the gateway's server."""

    async def go():
        service = stack.service()
        gateway = TaskGateway(ControllerClient(fleet.url, start_jitter_s=0.0), service)
        app = create_app(service)
        app.mount("/tasks", gateway.app())
        async with serve_in_loop(without_caller_rewards(app)) as url:
            scene = Scene(stack, fleet, url, gateway)
            try:
                return await asyncio.to_thread(scenario, scene)
            finally:
                scene.controller.close()
                await gateway.controller.aclose()

    return asyncio.run(go())


def test_the_example_agent_is_rewarded_by_the_environment(stack, fleet):
    def scenario(scene):
        job = scene.job(index=1)
        ended = play(scene.llm, scene.controller, model="tiny-agent", task="weather", index=1,
                     trajectory_id="t", max_turns=4, max_tokens=40)
        return job, ended, scene.gateway.pop_finished()

    job, ended, [rollout] = run(stack, fleet, scenario)
    assert ended == {"trajectory_id": "t", "turns": 2, "finish": True, "status": "completed",
                     "reward": 1.0}
    assert (job.status, job.reward) == (SampleStatus.COMPLETED, 1.0)
    assert (rollout.reward, rollout.status, rollout.task) == (1.0, SampleStatus.COMPLETED,
                                                              "weather")
    assert rollout.metrics["graded"] and rollout.metrics["index"] == 1
    # Both turns are the script's tokens, sampled, in the stream trained on.
    assert rollout.tokens[rollout.loss_mask > 0].tolist() == stack.tool_ids * 2


def test_the_agent_cannot_give_a_reward(stack, fleet):
    def scenario(scene):
        job = scene.job()
        _, state = scene.start(job)
        scene.sample(job, state["messages"])
        return httpx.post(f"{scene.url}/v1/trajectories/t/reward", json={"reward": 1.0})

    refused = run(stack, fleet, scenario)
    assert refused.status_code == 403
    assert refused.json()["error"]["code"] == "rewards_from_environment"


def test_a_turn_the_policy_did_not_sample_never_reaches_the_environment(stack, fleet):
    def scenario(scene):
        job = scene.job()
        session, state = scene.start(job)
        before = scene.interact(session, {"role": "assistant", "content": "Sunny."})
        turn = scene.sample(job, state["messages"])
        forged = json.loads(json.dumps(turn))
        forged["tool_calls"][0]["function"]["arguments"] = '{"city": "Rome"}'
        return before, scene.interact(session, forged), scene.interact(session, turn), job

    before, forged, honest, job = run(stack, fleet, scenario)
    assert before.status_code == forged.status_code == 409
    assert honest.status_code == 200 and honest.json()["finish"]
    assert (job.status, job.reward, job.forwarded) == (SampleStatus.COMPLETED, 1.0, 1)


def test_a_prompt_that_is_not_the_environments_is_refused(stack, fleet):
    def scenario(scene):
        job = scene.job()
        session, state = scene.start(job)
        hinted = [*state["messages"][:-1], {"role": "user", "content": QUESTION + " (Paris!)"}]
        assert scene.interact(session, scene.sample(job, hinted)).json()["reward"] == 1.0
        return job, scene.gateway.pop_finished()

    job, [rollout] = run(stack, fleet, scenario)
    assert (job.status, job.reward) == (SampleStatus.AGENT_VALIDATION_FAILED, 0.0)
    assert rollout.status == SampleStatus.AGENT_VALIDATION_FAILED and rollout.reward == 0.0
    assert "not the environment's" in rollout.metrics["refused"]


def test_a_turn_sampled_but_not_sent_is_refused(stack, fleet):
    def scenario(scene):
        job = scene.job()
        session, state = scene.start(job)
        scene.sample(job, state["messages"])
        second = scene.sample(job, state["messages"])  # a second draw of the same turn
        refused = scene.interact(session, second)
        scene.controller.post("/cancel", headers=session)
        return refused, job

    refused, job = run(stack, fleet, scenario)
    assert refused.status_code == 409
    assert job.status == SampleStatus.AGENT_VALIDATION_FAILED


def test_a_job_is_played_as_given(stack, fleet):
    def scenario(scene):
        job = scene.job(index=2)
        post = scene.controller.post
        wrong_index = post("/start_sample", json={"name": "weather", "index": 3},
                           headers={"X-Trajectory-Id": "t"})
        no_job = post("/start_sample", json={"name": "weather", "index": 2})
        session, _ = scene.start(job)
        again = post("/start_sample", json={"name": "weather", "index": 2},
                     headers={"X-Trajectory-Id": "t"})
        stranger = post("/interact", json={"messages": [{"role": "assistant"}]},
                        headers={"session_id": str(int(session["session_id"]) + 1000)})
        return wrong_index, no_job, again, stranger

    wrong_index, no_job, again, stranger = run(stack, fleet, scenario)
    assert wrong_index.status_code == no_job.status_code == 403
    assert again.status_code == 409 and stranger.status_code == 404


def test_how_an_unfinished_job_ends(stack, fleet):
    def scenario(scene):
        quits = scene.job(index=1, name="quits")
        session, state = scene.start(quits)
        scene.interact(session, scene.sample(quits, state["messages"]))
        assert scene.controller.post("/cancel", headers=session).status_code == 200
        never = scene.job(name="never")
        scene.end_job("never", "the agent exited")
        stopped = scene.job(name="stopped")
        _, state = scene.start(stopped)
        scene.sample(stopped, state["messages"])  # stopped before it could send the turn
        scene.end_job("stopped", "the agent was stopped")
        return quits, never, stopped, scene.gateway.pop_finished(), scene.fleet.sessions()

    quits, never, stopped, rollouts, sessions = run(stack, fleet, scenario)
    by_id = {r.metrics["trajectory_id"]: r for r in rollouts}
    # Cancelled after a turn: truncated (penalised in training), the environment's session gone.
    assert quits.status == by_id["quits"].status == SampleStatus.RUNNING
    assert by_id["quits"].num_turns == 1
    assert sessions[quits.session_id]["status"] == "cancelled"
    # Never started: nothing seen, masked.
    assert never.status == by_id["never"].status == SampleStatus.TASK_ERROR
    assert len(by_id["never"].tokens) == 0 and by_id["never"].metrics["group_size"] == 1
    # Stopped between sampling a turn and sending it: truncated too, that turn kept.
    assert stopped.status == by_id["stopped"].status == SampleStatus.RUNNING
    assert by_id["stopped"].num_turns == 1 and "refused" not in by_id["stopped"].metrics
