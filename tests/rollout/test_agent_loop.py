"""The agent loop against a real controller and echo workers over HTTP.

The policy here is a scripted generator (the unit under test is the loop, not the sampler);
the pipeline tests run the loop with the real JAX sampling engine.
"""

import asyncio
import json
import random

import numpy as np
import pytest

from agentrl_jax.controller.client import ControllerClient
from agentrl_jax.episode import SampleStatus
from agentrl_jax.rollout.agent_loop import AgentSpec, EpisodeLimits, play_group, run_episode
from agentrl_jax.rollout.cross_policy import PolicyMix
from agentrl_jax.sampling.types import FinishReason, GenerationResult, SamplingParams
from environments.echo import EchoTask


class ScriptedGenerator:
    """Answers every turn with `reply(turn_number)`, tokenized, plus the end-of-turn token."""

    def __init__(self, tokenizer, reply, fail_on_turn=None):
        self.tokenizer, self.reply, self.fail_on_turn = tokenizer, reply, fail_on_turn
        self.requests, self.ended = [], []

    async def generate(self, request):
        turn = len(self.requests)
        self.requests.append(request)
        if turn == self.fail_on_turn:
            raise RuntimeError("sampler exploded")
        ids = self.tokenizer.encode(self.reply(turn), add_special_tokens=False)
        ids = ids[: request.params.max_new_tokens - 1] + [self.tokenizer.eos_token_id]
        return GenerationResult(
            tokens=ids, logprobs=[-0.5] * len(ids), versions=[7] * len(ids),
            policy=request.policy, finish_reason=FinishReason.STOP)

    async def end_session(self, session_id):
        self.ended.append(session_id)


def echo_reply(turn):
    call = {"name": "echo", "arguments": {"text": f"hello {turn}"}}
    return f"<tool_call>\n{json.dumps(call)}\n</tool_call>"


def _agent(tokenizer, **kw):
    return AgentSpec(tokenizer=tokenizer, sampling=SamplingParams(temperature=1.0), **kw)


def _play(fleet, generator, agent, index=0, task="echo"):
    async def go():
        async with ControllerClient(fleet.url, start_jitter_s=0) as client:
            return await run_episode(client, generator, agent, task, index, group_id=3, member=1,
                                     rng=random.Random(0))
    return asyncio.run(go())


def test_completed_episode_records_exact_stream(fleet, tokenizer):
    fleet.add_worker(EchoTask(rounds=3))
    gen = ScriptedGenerator(tokenizer, echo_reply)
    rollout = _play(fleet, gen, _agent(tokenizer))

    assert rollout.status == SampleStatus.COMPLETED and rollout.reward == 1.0
    assert rollout.num_turns == 3 and (rollout.group_id, rollout.member) == (3, 1)
    # Each turn's prompt is exactly the stream so far: token-in, token-out.
    for request in gen.requests[1:]:
        assert list(request.prompt) == rollout.tokens[: len(request.prompt)].tolist()
    sampled = [tokenizer.encode(echo_reply(t), add_special_tokens=False)
               + [tokenizer.eos_token_id] for t in range(3)]
    assert rollout.loss_mask.sum() == sum(len(s) for s in sampled)
    assert rollout.tokens[rollout.loss_mask == 1].tolist() == sum(sampled, [])
    assert set(rollout.logprobs[rollout.loss_mask == 1]) == {-0.5}
    assert set(rollout.versions[rollout.loss_mask == 1]) == {7}
    assert set(rollout.versions[rollout.loss_mask == 0]) == {-1}
    # The environment saw the parsed tool calls and answered them.
    tool_messages = [m for m in rollout.messages if m["role"] == "tool"]
    assert [m["content"] for m in tool_messages] == ["hello 0", "hello 1"]
    assert gen.ended == [gen.requests[0].session_id]
    assert all(r.session_id == gen.requests[0].session_id for r in gen.requests)


def test_turn_limit_ends_with_task_limit_and_cancels_the_session(fleet, tokenizer):
    fleet.add_worker(EchoTask(rounds=5))
    rollout = _play(fleet, ScriptedGenerator(tokenizer, echo_reply),
                    _agent(tokenizer, limits=EpisodeLimits(max_turns=2)))
    assert rollout.status == SampleStatus.TASK_LIMIT_REACHED and rollout.num_turns == 2
    fleet.wait_for(lambda: all(s["status"] != "running" for s in fleet.sessions().values()))


def test_context_limit_ends_with_agent_context_limit(fleet, tokenizer):
    fleet.add_worker(EchoTask(rounds=5))
    gen = ScriptedGenerator(tokenizer, echo_reply)
    first_prompt_len = None

    async def probe():
        async with ControllerClient(fleet.url, start_jitter_s=0) as client:
            started = await client.start_sample("echo", 0)
            await client.cancel(started.session_id)
            from agentrl_jax.chat.conversation import Conversation
            return len(Conversation(tokenizer, started.messages, started.tools))

    first_prompt_len = asyncio.run(probe())
    limits = EpisodeLimits(max_context_tokens=first_prompt_len + 60)
    rollout = _play(fleet, gen, _agent(tokenizer, limits=limits))
    assert rollout.status == SampleStatus.AGENT_CONTEXT_LIMIT
    assert len(rollout.tokens) <= first_prompt_len + 60 + 40  # at most one env delta past it
    # No turn was asked for more tokens than the context had room for.
    for request in gen.requests:
        assert len(request.prompt) + request.params.max_new_tokens <= limits.max_context_tokens


def test_malformed_tool_call_goes_to_the_environment_as_text(fleet, tokenizer):
    fleet.add_worker(EchoTask(rounds=3))
    gen = ScriptedGenerator(tokenizer, lambda t: '<tool_call>{"name": echo}</tool_call>')
    rollout = _play(fleet, gen, _agent(tokenizer))
    # The echo task ends a turn without a valid echo call as an invalid action.
    assert rollout.status == SampleStatus.AGENT_INVALID_ACTION
    assert rollout.messages[-1]["role"] == "assistant"
    assert "tool_calls" not in rollout.messages[-1]


def test_sampler_failure_is_a_task_error_and_frees_the_session(fleet, tokenizer):
    fleet.add_worker(EchoTask(rounds=3))
    gen = ScriptedGenerator(tokenizer, echo_reply, fail_on_turn=1)
    rollout = _play(fleet, gen, _agent(tokenizer))
    assert rollout.status == SampleStatus.TASK_ERROR and "sampler exploded" in rollout.error
    assert gen.ended  # KV pages released
    fleet.wait_for(lambda: all(s["status"] != "running" for s in fleet.sessions().values()))


def test_unreachable_controller_gives_an_empty_masked_rollout(tokenizer):
    async def go():
        async with ControllerClient("http://127.0.0.1:9", start_retries=0,
                                    start_jitter_s=0) as client:
            return await run_episode(client, ScriptedGenerator(tokenizer, echo_reply),
                                     _agent(tokenizer), "echo", 0)
    rollout = asyncio.run(go())
    assert rollout.status == SampleStatus.TASK_ERROR and not rollout.trainable
    assert rollout.tokens.size == 0


def test_cross_policy_choice_is_recorded_per_turn(fleet, tokenizer):
    fleet.add_worker(EchoTask(rounds=5))
    mix = PolicyMix({"current": 0.5, "stale": 0.5})
    gen = ScriptedGenerator(tokenizer, echo_reply)
    rollout = _play(fleet, gen, _agent(tokenizer, policy_mix=mix), index=4)
    chosen = [r.policy for r in gen.requests]
    assert set(chosen) == {"current", "stale"}  # seeded rng: both appear over 5 turns
    ids = rollout.policy_ids[rollout.loss_mask == 1]
    # Token policy ids follow the per-turn choices, in order.
    turn_ids = [int(ids[0])] + [int(b) for a, b in zip(ids, ids[1:], strict=False) if a != b]
    assert turn_ids == [mix.policy_id(p) for p in _dedupe(chosen)]


def test_a_group_plays_each_member_on_its_own_seed_drawn_up_front(fleet, tokenizer):
    fleet.add_worker(EchoTask(rounds=4))
    agent = _agent(tokenizer, policy_mix=PolicyMix({"current": 0.5, "stale": 0.5}))
    ended = []

    def same_reply(_turn):   # every turn alike, so only the members' seeds tell them apart
        return echo_reply(0)

    async def go():
        async with ControllerClient(fleet.url, start_jitter_s=0) as client:
            rng = random.Random(5)
            group = await play_group(client, ScriptedGenerator(tokenizer, same_reply), agent,
                                     "echo", 2, group_id=9, group_size=3, rng=rng,
                                     on_rollout=ended.append)
            after = rng.getrandbits(32)
            draws = random.Random(5)
            seeds = [draws.getrandbits(32) for _ in range(3)]
            assert after == draws.getrandbits(32)   # the group drew exactly its 3 seeds
            alone = [await run_episode(client, ScriptedGenerator(tokenizer, same_reply), agent,
                                       "echo", 2, group_id=9, member=m,
                                       rng=random.Random(seeds[m])) for m in range(3)]
            return group, alone

    group, alone = asyncio.run(go())
    assert [(r.group_id, r.member, r.index) for r in group] == [(9, 0, 2), (9, 1, 2), (9, 2, 2)]
    assert sorted(r.member for r in ended) == [0, 1, 2]   # each handed over as it ended
    for played, reference in zip(group, alone, strict=True):
        assert played.status == SampleStatus.COMPLETED
        np.testing.assert_array_equal(played.tokens, reference.tokens)
        np.testing.assert_array_equal(played.policy_ids, reference.policy_ids)
    assert len({tuple(r.policy_ids.tolist()) for r in group}) > 1   # the seeds differ


def _dedupe(seq):
    out = []
    for x in seq:
        if not out or out[-1] != x:
            out.append(x)
    return out


@pytest.mark.parametrize("weights", [{}, {"a": -1.0}, {"a": 0.0}])
def test_policy_mix_rejects_bad_weights(weights):
    with pytest.raises(ValueError):
        PolicyMix(weights)


def test_policy_mix_frequencies_follow_weights():
    mix = PolicyMix.current_and_stale(0.25)
    rng = random.Random(1)
    picks = [mix.choose(rng) for _ in range(4000)]
    assert abs(np.mean([p == "stale" for p in picks]) - 0.25) < 0.03


class _HeldStartClient(ControllerClient):
    """A real client whose `start_sample` returns only once `release` is set: the session exists
    at the controller while its caller is still waiting for the id."""

    def __init__(self, url):
        super().__init__(url, start_jitter_s=0)
        self.reached, self.release = asyncio.Event(), asyncio.Event()

    async def start_sample(self, task, index):
        started = await super().start_sample(task, index)
        self.reached.set()
        await self.release.wait()
        return started


def test_an_episode_cancelled_while_starting_ends_its_session(fleet, tokenizer):
    fleet.add_worker(EchoTask(rounds=3))

    async def go():
        async with _HeldStartClient(fleet.url) as client:
            episode = asyncio.create_task(run_episode(
                client, ScriptedGenerator(tokenizer, echo_reply), _agent(tokenizer), "echo", 0))
            await client.reached.wait()
            assert [s["status"] for s in fleet.sessions().values()] == ["running"]
            episode.cancel()   # as the pipeline cancels its rollout workers when it stops
            client.release.set()
            with pytest.raises(asyncio.CancelledError):
                await episode

    asyncio.run(go())
    fleet.wait_for(lambda: all(s["status"] != "running" for s in fleet.sessions().values()))


class _FirstStartHeldClient(ControllerClient):
    """A real client that holds only its first `start_sample` until `release`, and sets
    `release` once it has cancelled any session: the held member is let go only after another
    member, cancelled while generating, has ended its own episode."""

    def __init__(self, url):
        super().__init__(url, start_jitter_s=0)
        self.reached, self.release = asyncio.Event(), asyncio.Event()
        self.starts, self.cancelled = 0, []

    async def start_sample(self, task, index):
        self.starts += 1
        held = self.starts == 1
        started = await super().start_sample(task, index)
        if held:
            self.reached.set()
            await self.release.wait()
        return started

    async def cancel(self, session_id):
        await super().cancel(session_id)
        self.cancelled.append(session_id)
        self.release.set()


class _BlockingGenerator(ScriptedGenerator):
    """Never answers: its caller waits in `generate` until cancelled."""

    def __init__(self, tokenizer):
        super().__init__(tokenizer, echo_reply)
        self.generating = asyncio.Event()

    async def generate(self, request):
        self.generating.set()
        await asyncio.Event().wait()


def test_a_cancelled_group_returns_only_after_every_member_ended_its_session(fleet, tokenizer):
    fleet.add_worker(EchoTask(rounds=3))

    async def go():
        async with _FirstStartHeldClient(fleet.url) as client:
            generator = _BlockingGenerator(tokenizer)
            group = asyncio.create_task(play_group(
                client, generator, _agent(tokenizer), "echo", 0, group_id=0, group_size=2,
                rng=random.Random(0)))
            await client.reached.wait()        # member 0: its session exists, id not yet known
            await generator.generating.wait()  # member 1: in the middle of its first turn
            group.cancel()
            with pytest.raises(asyncio.CancelledError):
                await group
            # Both sessions were ended by the members themselves, before the group returned.
            assert sorted(client.cancelled) == sorted(fleet.sessions())

    asyncio.run(go())
    fleet.wait_for(lambda: all(s["status"] != "running" for s in fleet.sessions().values()))
