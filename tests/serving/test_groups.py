"""Served trajectories enter the pipeline's buffer as groups and train as its own rollouts do."""

import asyncio
import dataclasses

import numpy as np
import pytest

from agentrl_jax.pipeline.admission import StalenessGate
from agentrl_jax.pipeline.batching import prepare_batch
from agentrl_jax.pipeline.runner import RLPipeline
from agentrl_jax.rl import advantages as adv_lib
from agentrl_jax.serving.groups import ServedGroups
from agentrl_jax.serving.trajectories import TrajectoryStore
from tests.support.pipeline_stack import pipeline_configs

ASK = [{"role": "user", "content": "What is 2 + 2?"}]
POLICY_IDS = {"current": 0, "stale": 1}


@pytest.fixture
def store(tokenizer):
    eot = tokenizer.convert_tokens_to_ids("<|im_end|>")
    return TrajectoryStore(tokenizer, "hermes", (eot,), POLICY_IDS)


def _pipeline(tokenizer, stale_ratio=0.25, max_staleness=1):
    """A pipeline with no engine, trainer or fleet: only its buffer and seam are used."""
    pcfg, agent = pipeline_configs(tokenizer, "async", stale_ratio=stale_ratio,
                                   max_staleness=max_staleness)
    return RLPipeline(pcfg, client=None, engine=None, trainer=None, agent=agent, stream=None,
                      adv_config=adv_lib.default_config())


def _say(store, tokenizer, trajectory, messages, text, version=0, policy="current"):
    """One served turn: `text` sampled (as its own tokens plus the end of turn)."""
    eot = tokenizer.convert_tokens_to_ids("<|im_end|>")
    traj, _ = store.begin_turn(trajectory, messages, None)
    tokens = tokenizer.encode(text, add_special_tokens=False) + [eot]
    logprobs = [-0.1 * (i + 1) for i in range(len(tokens))]
    store.end_turn(traj, tokens=tokens, logprobs=logprobs, versions=[version] * len(tokens),
                   policy=policy, returned={"role": "assistant", "content": text})
    return tokens, logprobs


def _play(store, tokenizer, trajectory, answers, policies=None, version=0):
    """A two-turn trajectory; returns the sampled tokens of each turn."""
    policies = policies or ["current"] * len(answers)
    messages, sampled = list(ASK), []
    for k, (answer, policy) in enumerate(zip(answers, policies, strict=True)):
        tokens, _ = _say(store, tokenizer, trajectory, messages, answer, version, policy)
        sampled.append(tokens)
        messages += [{"role": "assistant", "content": answer},
                     {"role": "user", "content": f"Are you sure? ({k})"}]
    return sampled


def _segments(batch):
    """Each packed trajectory of the batch: (its token stream, targets under loss, advantages)."""
    out = []
    for micro in batch.micro_batches:
        for row in range(micro.tokens.shape[0]):
            seg_ids = micro.segment_ids[row]
            for seg in sorted(set(seg_ids[seg_ids > 0].tolist())):
                at = seg_ids == seg
                stream = [*micro.tokens[row][at].tolist(), int(micro.targets[row][at][-1])]
                loss = micro.loss_mask[row][at] > 0
                out.append((stream, micro.targets[row][at][loss].tolist(),
                            micro.advantages[row][at][loss]))
    return out


def test_served_groups_train_on_the_sampled_tokens_with_grpo_and_task_norm(store, tokenizer):
    pipeline = _pipeline(tokenizer)
    groups = ServedGroups(pipeline.add_group, default_size=2)
    rewards = {("math", 5, 0): 1.0, ("math", 5, 1): 0.0, ("chat", 9, 0): 0.5,
               ("chat", 9, 1): 0.25}
    sampled, streams = {}, {}
    for (task, group_id, member), reward in rewards.items():
        trajectory = f"{task}-{member}"
        answers = [f"{task}: four.", "Yes."] if member == 0 else [f"{task}: five?", "No, four!"]
        sampled[task, member] = _play(store, tokenizer, trajectory, answers,
                                      policies=["current", "stale"])
        store.finish(trajectory, reward, task=task, group_id=group_id, member=member)
        groups.add(store.pop_finished())
    assert groups.submitted == 2 and groups.num_open == 0
    assert pipeline.buffer.num_ready == 2

    taken = pipeline.buffer.take(current_version=1)
    assert taken.discarded == 0
    # The pipeline's own group ids, not the caller's; the caller's id names the draw.
    assert sorted(g[0].group_id for g in taken.groups) == [0, 1]
    assert {g[0].index for g in taken.groups} == {5, 9}
    for group in taken.groups:
        for rollout in group:
            streams[rollout.task, rollout.member] = rollout.tokens.tolist()
    batch = prepare_batch(taken.groups, adv_lib.default_config(), (512,), 2048)
    assert batch is not None and batch.num_rollouts == 4

    # Hand-computed: GRPO within each group (unbiased std), then z-scored per task over its
    # loss tokens; with two members and one task per group each member gets ±1/sqrt(2) and
    # task normalisation maps a two-value group to about ±1 (the token weights are unequal).
    found = {}
    for stream, targets, advantages in _segments(batch):
        (key,) = [k for k, s in streams.items() if s == stream]
        assert targets == [t for turn in sampled[key] for t in turn]  # exactly the sampled ids
        assert np.allclose(advantages, advantages[0])
        found[key] = float(advantages[0])
    assert set(found) == set(streams)
    for task, group_id in (("math", 5), ("chat", 9)):
        r = np.array([rewards[task, group_id, m] for m in (0, 1)])
        grpo = (r - r.mean()) / (r.std(ddof=1) + 1e-6)
        n = np.array([sum(map(len, sampled[task, m])) for m in (0, 1)], float)
        mu = (n * grpo).sum() / n.sum()
        sigma = np.sqrt((n * (grpo - mu) ** 2).sum() / (n.sum() - 1))
        expected = (grpo - mu) / (sigma + 1e-6)
        np.testing.assert_allclose([found[task, 0], found[task, 1]], expected, rtol=1e-5)


def test_served_batch_equals_the_pipelines_own_rollouts(store, tokenizer):
    """The same episodes delivered by the pipeline's own path (open_group + add, as the agent
    loop does) or served through the seam give the same batch."""
    served = _pipeline(tokenizer)
    groups = ServedGroups(served.add_group, default_size=2)
    own = _pipeline(tokenizer)
    for member, reward in ((0, 1.0), (1, 0.0)):
        _play(store, tokenizer, f"t{member}", ["Four." if member == 0 else "Five.", "Yes."])
        store.finish(f"t{member}", reward, task="math", group_id=3, member=member)
    rollouts = store.pop_finished()
    groups.add(rollouts)
    own.buffer.open_group(0, "math")
    for rollout in rollouts:
        own.buffer.add(dataclasses.replace(rollout, group_id=0))
    config = adv_lib.default_config()
    a = prepare_batch(served.buffer.take(1).groups, config, (512,), 2048)
    b = prepare_batch(own.buffer.take(1).groups, config, (512,), 2048)
    assert a is not None and b is not None
    for x, y in zip(a.micro_batches, b.micro_batches, strict=True):
        for field in ("tokens", "targets", "loss_mask", "advantages", "behaviour_logprobs"):
            np.testing.assert_array_equal(getattr(x, field), getattr(y, field))
    assert np.abs(a.micro_batches[0].advantages).max() > 0.5


def test_a_multi_segment_trajectory_trains_its_last_segment_as_one_member(store, tokenizer):
    pipeline = _pipeline(tokenizer)
    groups = ServedGroups(pipeline.add_group, default_size=2)
    _say(store, tokenizer, "edited", ASK, "Four.")
    # The agent rewrites its history: a new segment from the messages as sent.
    rewritten = [{"role": "user", "content": "What is 2 + 2? Answer in words."}]
    last, _ = _say(store, tokenizer, "edited", rewritten, "Four, surely.")
    store.finish("edited", 1.0, group_id=1, member=0)
    _say(store, tokenizer, "plain", ASK, "Five.")
    store.finish("plain", 0.0, group_id=1, member=1)
    rollouts = store.pop_finished()
    assert len(rollouts) == 3  # two segments, one segment
    groups.add(rollouts)
    assert groups.segments_dropped == 1
    (group,) = pipeline.buffer.take(1).groups
    assert [r.member for r in group] == [0, 1]
    assert group[0].metrics["segment"] == 1 and group[0].tokens[-len(last):].tolist() == last


def test_groups_wait_for_their_declared_size_and_reject_bad_members(store, tokenizer):
    pipeline = _pipeline(tokenizer)
    groups = ServedGroups(pipeline.add_group, default_size=2)
    for member in range(3):
        _say(store, tokenizer, f"m{member}", ASK, "Four.")
    store.finish("m0", 1.0, group_id=4, member=0, group_size=3)
    store.finish("m1", 0.0, group_id=4, member=0, group_size=3)  # member 0 again
    groups.add(store.pop_finished())
    assert groups.rejected["duplicate"] == 1 and pipeline.buffer.num_ready == 0
    store.finish("m2", 0.0, group_id=4, member=1, group_size=2)  # another size
    groups.add(store.pop_finished())
    assert groups.rejected["size"] == 1
    for member in (1, 2):
        _say(store, tokenizer, f"n{member}", ASK, "Five.")
        store.finish(f"n{member}", 0.5 * member, group_id=4, member=member, group_size=3)
        groups.add(store.pop_finished())
    assert pipeline.buffer.num_ready == 1 and groups.submitted == 1
    (group,) = pipeline.buffer.take(1).groups
    assert [r.reward for r in group] == [1.0, 0.5, 1.0]
    _say(store, tokenizer, "far", ASK, "Five.")
    store.finish("far", 0.0, group_id=8, member=2)  # default size 2
    groups.add(store.pop_finished())
    assert groups.rejected["member"] == 1 and groups.num_open == 0


def test_groups_completed_while_no_pipeline_is_attached_wait_for_one(store, tokenizer):
    pipeline = _pipeline(tokenizer)
    groups = ServedGroups(default_size=1, max_open=2)

    def complete(trajectory, group_id):
        _say(store, tokenizer, trajectory, ASK, "Four.")
        store.finish(trajectory, 1.0, group_id=group_id)
        return groups.add(store.pop_finished())

    assert [complete(f"t{g}", g) for g in range(3)] == [0, 0, 0]   # no feed: nothing filed
    assert groups.groups_dropped == 1 and groups.submitted == 0   # the oldest, past max_open
    asyncio.run(groups.attach(pipeline))
    assert groups.submitted == 2 and pipeline.buffer.num_ready == 2
    taken = pipeline.buffer.take(current_version=0).groups   # the newest two, by draw
    assert sorted(g[0].index for g in taken) == [1, 2]
    assert complete("t3", 3) == 1 and pipeline.buffer.num_ready == 1   # filed as it completes
    asyncio.run(groups.detach())
    assert complete("t4", 4) == 0 and groups.submitted == 3   # waits for the next feed


def test_stale_served_groups_are_dropped_by_their_trained_policy_tokens(store, tokenizer):
    pipeline = _pipeline(tokenizer, max_staleness=1)
    groups = ServedGroups(pipeline.add_group, default_size=1)
    # The trained policy's turn is of version 0: lag 2 at version 2, over the bound of 1.
    _say(store, tokenizer, "old", ASK, "Four.", version=0, policy="current")
    store.finish("old", 1.0, group_id=0)
    groups.add(store.pop_finished())
    taken = pipeline.buffer.take(current_version=2)
    assert taken.groups == [] and taken.discarded == 1
    assert pipeline.buffer.stats.groups_dropped_stale == 1
    # Cross-policy: a stale-snapshot turn of version 0 is old on purpose and does not count.
    messages = list(ASK)
    for text, version, policy in (("Four.", 0, "stale"), ("Yes.", 2, "current")):
        _say(store, tokenizer, "mixed", messages, text, version=version, policy=policy)
        messages += [{"role": "assistant", "content": text},
                     {"role": "user", "content": "Sure?"}]
    store.finish("mixed", 1.0, group_id=1)
    (mixed,) = store.pop_finished()
    assert set(mixed.policy_ids[mixed.loss_mask > 0].tolist()) == {0, 1}
    groups.add([mixed])
    taken = pipeline.buffer.take(current_version=2)
    assert len(taken.groups) == 1 and taken.discarded == 0


def test_external_groups_count_in_the_staleness_gate():
    async def run():
        gate = StalenessGate(groups_per_step=2, max_staleness=0)
        assert gate.count_started() == 0 and gate.count_started() == 1
        assert not gate.allowed()  # the served groups took this version's admissions
        await gate.release(1)  # one was discarded: its admission comes back
        assert gate.allowed()

    asyncio.run(run())
