"""Trajectories: turns of one id form one append-only stream of the sampled tokens."""

import concurrent.futures

import httpx
import numpy as np
import pytest

from agentrl_jax.episode import SampleStatus
from agentrl_jax.rollout.record import Rollout
from launch.demo import WEATHER_TOOL
from tests.serving.conftest import TOOL_CALL, wait_until

ASK = [{"role": "user", "content": "What is the weather in Paris?"}]


def _ext(response):
    return response.model_extra["agentrl"]


def _turn(client, messages, trajectory, **kw):
    return client.chat.completions.create(
        model="tiny-agent", messages=messages, tools=[WEATHER_TOOL], temperature=0,
        extra_body={"trajectory_id": trajectory}, **kw)


def _answer(response):
    """What an agent framework sends back: the assistant message, then the tool's result."""
    message = response.choices[0].message.model_dump(exclude_none=True)
    call = response.choices[0].message.tool_calls[0]
    return [message, {"role": "tool", "tool_call_id": call.id, "content": "sunny, 21 C"}]


def test_continuation_appends_the_sampled_tokens_not_a_retokenization(server, client, stack):
    first = _turn(client, ASK, "traj-a")
    ext1 = _ext(first)
    sampled = ext1["choices"][0]["completion_token_ids"]
    # The call was sampled as tokens that are not the tokenizer's encoding of its text.
    assert stack.tokenizer.decode(sampled[:-1]) == TOOL_CALL
    assert stack.tokenizer.encode(TOOL_CALL, add_special_tokens=False) != sampled[:-1]
    assert ext1["trajectory_id"] == "traj-a" and ext1["segment"] == 0

    messages = ASK + _answer(first)
    second = client.chat.completions.create(
        model="tiny-agent", messages=messages, tools=[WEATHER_TOOL], temperature=0,
        extra_headers={"X-Trajectory-Id": "traj-a"})
    ext2 = _ext(second)
    stream = ext1["prompt_token_ids"] + sampled
    assert ext2["prompt_token_ids"][: len(stream)] == stream  # the sampled ids, verbatim
    assert ext2["segment"] == 0
    # The engine reused the stream's KV cache: only the tool result's delta was prefilled.
    assert ext2["num_reused_tokens"] >= len(stream) - 1
    # A request without the trajectory renders the same conversation from its text instead.
    fresh = client.chat.completions.create(model="tiny-agent", messages=messages,
                                           tools=[WEATHER_TOOL], temperature=0, max_tokens=1)
    assert _ext(fresh)["prompt_token_ids"] != ext2["prompt_token_ids"]

    done = httpx.post(f"{server.url}/v1/trajectories/traj-a/reward",
                      json={"reward": 1.0, "task": "weather", "group_id": 7, "member": 2})
    assert done.status_code == 200 and done.json()["segments"] == 1
    (rollout,) = [r for r in server.service.trajectories.pop_finished()
                  if r.index == "traj-a"]
    assert isinstance(rollout, Rollout)
    assert (rollout.task, rollout.group_id, rollout.member) == ("weather", 7, 2)
    assert rollout.reward == 1.0 and rollout.status is SampleStatus.COMPLETED
    assert rollout.num_turns == 2
    second_sampled = ext2["choices"][0]["completion_token_ids"]
    assert rollout.tokens.tolist() == ext2["prompt_token_ids"] + second_sampled
    assert rollout.tokens[rollout.loss_mask == 1].tolist() == sampled + second_sampled
    logprobs = ext1["choices"][0]["logprobs"] + ext2["choices"][0]["logprobs"]
    np.testing.assert_allclose(rollout.logprobs[rollout.loss_mask == 1], logprobs, rtol=1e-6)
    assert set(rollout.versions[rollout.loss_mask == 1]) == {0}
    assert set(rollout.policy_ids[rollout.loss_mask == 1]) == {0}
    assert set(rollout.versions[rollout.loss_mask == 0]) == {-1}
    assert rollout.trainable
    # Finished: it is gone.
    again = httpx.post(f"{server.url}/v1/trajectories/traj-a/reward", json={"reward": 0.0})
    assert again.status_code == 404
    assert again.json()["error"]["code"] == "trajectory_not_found"


def test_an_edited_conversation_starts_a_new_segment(server, client):
    first = _turn(client, ASK, "traj-b")
    answer = _answer(first)
    second = _turn(client, ASK + answer, "traj-b")
    assert _ext(second)["segment"] == 0
    # The agent rewrites its first user message: the stream no longer holds these messages.
    edited = [{"role": "user", "content": "Weather in Lyon?"}] + answer + _answer(second)
    third = _turn(client, edited, "traj-b")
    ext3 = _ext(third)
    assert ext3["segment"] == 1
    assert ext3["num_reused_tokens"] < len(_ext(second)["prompt_token_ids"])
    done = httpx.post(f"{server.url}/v1/trajectories/traj-b/reward", json={"reward": 0.5})
    body = done.json()
    assert body["segments"] == 2
    assert body["edits"] == [{"segment": 1, "after_turns": 2, "first_changed_message": 0,
                              "messages_sent": 5, "messages_known": 4}]
    rollouts = [r for r in server.service.trajectories.pop_finished() if r.index == "traj-b"]
    assert [r.metrics["segment"] for r in rollouts] == [0, 1]
    assert [r.num_turns for r in rollouts] == [2, 1]
    assert rollouts[1].tokens.tolist() == (ext3["prompt_token_ids"]
                                           + ext3["choices"][0]["completion_token_ids"])
    assert all(r.reward == 0.5 for r in rollouts)


@pytest.mark.parametrize("change", ["retry", "assistant_written", "tools"])
def test_anything_but_an_extension_is_an_edit(server, client, change):
    trajectory = f"traj-{change}"
    first = _turn(client, ASK, trajectory)
    if change == "retry":  # the same request again: the last turn is not in the messages
        again = _turn(client, ASK, trajectory)
    elif change == "assistant_written":  # an assistant turn the policy did not sample
        again = _turn(client, ASK + _answer(first) + [
            {"role": "assistant", "content": "It is sunny."},
            {"role": "user", "content": "Thanks"}], trajectory)
    else:
        again = client.chat.completions.create(
            model="tiny-agent", messages=ASK + _answer(first), temperature=0,
            extra_body={"trajectory_id": trajectory})
    assert _ext(again)["segment"] == 1


def test_one_trajectory_one_turn_at_a_time_and_one_choice(server, client, stack):
    import openai

    with pytest.raises(openai.BadRequestError) as error:
        _turn(client, ASK, "traj-n", n=2)
    assert error.value.body["param"] == "n"
    store = server.service.trajectories
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        with stack.engine.paused():  # the first turn stays in flight
            in_flight = pool.submit(_turn, client, ASK, "traj-busy")
            wait_until(lambda: store.get("traj-busy") is not None
                       and store.get("traj-busy").busy)
            with pytest.raises(openai.ConflictError) as error:
                _turn(client, ASK, "traj-busy")
            assert error.value.body["code"] == "trajectory_busy"
            reward = httpx.post(f"{server.url}/v1/trajectories/traj-busy/reward",
                                json={"reward": 1.0})
            assert reward.status_code == 409
        assert _ext(in_flight.result())["segment"] == 0


def test_open_trajectories_are_bounded_least_recently_used_first(stack):
    from agentrl_jax.serving.trajectories import TrajectoryStore

    store = TrajectoryStore(stack.tokenizer, "hermes", (stack.eos,), {"current": 0}, max_open=2)
    for name in ("a", "b"):
        trajectory, evicted = store.begin_turn(name, ASK, None)
        assert evicted == []
        store.end_turn(trajectory, tokens=[stack.eos], logprobs=[-0.1], versions=[3],
                       policy="current", returned={"role": "assistant", "content": ""})
    store.begin_turn("a", ASK + [{"role": "assistant", "content": ""},
                                 {"role": "user", "content": "more"}], None)  # a is busy now
    _, evicted = store.begin_turn("c", ASK, None)
    assert evicted == ["serving/b/0"] and store.dropped == 1  # b: the idle one
    assert store.get("b") is None and store.get("a").segments[0].num_turns == 1
    with pytest.raises(KeyError):
        store.finish("b", 1.0)
