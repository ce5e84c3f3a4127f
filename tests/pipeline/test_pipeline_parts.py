"""The pipeline's parts on their own: task stream, buffer, staleness gate, batch preparation."""

import asyncio
import collections

import ml_collections
import numpy as np
import pytest

from agentrl_jax.data import TaskStream
from agentrl_jax.episode import SampleStatus
from agentrl_jax.pipeline import curriculum, runner
from agentrl_jax.pipeline.admission import StalenessGate
from agentrl_jax.pipeline.batching import has_reward_variance, prepare_batch, training_masks
from agentrl_jax.pipeline.buffer import TrajectoryBuffer
from agentrl_jax.rl import advantages
from agentrl_jax.rollout.agent_loop import AgentSpec
from agentrl_jax.rollout.cross_policy import STALE_POLICY, TRAINED_POLICY, PolicyMix
from agentrl_jax.rollout.record import Rollout
from agentrl_jax.sampling import SamplingParams
from tests.support.rollouts import rollout

# ---- TaskStream -------------------------------------------------------------------------------

def test_stream_draws_tasks_equally_and_covers_indices():
    stream = TaskStream({"a": list(range(3)), "b": list(range(100, 110))}, seed=0)
    draws = [next(stream) for _ in range(60)]
    counts = collections.Counter(task for task, _ in draws)
    assert counts["a"] == counts["b"] == 30
    assert {i for t, i in draws if t == "a"} == {0, 1, 2}
    assert {i for t, i in draws if t == "b"} == set(range(100, 110))


def test_stream_resumes_from_its_state():
    stream = TaskStream({"a": list(range(5)), "b": list(range(7))}, seed=3)
    for _ in range(11):
        next(stream)
    state = stream.get_state()
    expected = [next(stream) for _ in range(9)]
    resumed = TaskStream({"a": list(range(5)), "b": list(range(7))}, seed=3)
    resumed.set_state(state)
    assert [next(resumed) for _ in range(9)] == expected


def test_stream_rejects_empty_tasks():
    with pytest.raises(ValueError, match="without indices"):
        TaskStream({"a": []})


# ---- TrajectoryBuffer -------------------------------------------------------------------------

def test_group_released_only_when_every_member_ended():
    buffer = TrajectoryBuffer(group_size=3)
    buffer.open_group(7, "t")
    buffer.add(rollout(7, 2))
    buffer.add(rollout(7, 0))
    assert buffer.num_ready == 0 and buffer.num_pending == 1
    # A member that died still ends the group: it is masked later, never waited for.
    buffer.add(Rollout.failed("t", 0, 7, 1, "worker died"))
    assert buffer.num_ready == 1
    (group,) = buffer.take(current_version=0).groups
    assert [r.member for r in group] == [0, 1, 2]


def test_duplicate_member_and_unknown_group_are_errors():
    buffer = TrajectoryBuffer(group_size=2)
    buffer.open_group(1, "t")
    buffer.add(rollout(1, 0))
    with pytest.raises(ValueError, match="already has member"):
        buffer.add(rollout(1, 0))
    with pytest.raises(KeyError):
        buffer.add(rollout(2, 0))


def test_stale_groups_are_dropped_and_lags_recorded():
    buffer = TrajectoryBuffer(group_size=1, max_staleness=1)
    for gid, version in enumerate([5, 4, 3]):
        buffer.open_group(gid, "t")
        buffer.add(rollout(gid, 0, version=version))
    taken = buffer.take(current_version=5)
    assert [g[0].group_id for g in taken.groups] == [0, 1]  # lag 0 and 1 kept, lag 2 dropped
    assert taken.discarded == 1 and buffer.stats.groups_dropped_stale == 1
    assert sorted(buffer.stats.lags) == [0, 1]
    assert buffer.stats.lag_summary()["lag_frac_1"] == 0.5


def test_stale_snapshot_turns_do_not_make_a_group_stale():
    # Cross-policy sampling: the snapshot (policy 1) is old by design; only the trained
    # policy's (0) tokens measure staleness.
    buffer = TrajectoryBuffer(group_size=1, max_staleness=1)
    mixed = rollout(0, 0, version=5, n=8, sampled=4)
    mixed.versions[4:6], mixed.policy_ids[4:6] = 0, 1   # two snapshot tokens of version 0
    old = rollout(1, 0, version=3)                       # the trained policy's, lag 2
    for gid, r in enumerate([mixed, old]):
        buffer.open_group(gid, "t")
        buffer.add(r)
    taken = buffer.take(current_version=5)
    assert [g[0].group_id for g in taken.groups] == [0]
    assert buffer.stats.groups_dropped_stale == 1 and buffer.stats.lags == [0]
    assert mixed.oldest_version() == 0 and mixed.oldest_version(policy_id=0) == 5


def test_the_trained_policy_is_found_by_name_in_the_mix():
    # A mix that lists the snapshot first: its id 0 is "stale", and the trained policy's
    # tokens (id 1) are the ones that measure staleness.
    mix = PolicyMix({STALE_POLICY: 0.5, TRAINED_POLICY: 0.5})
    buffer = TrajectoryBuffer(group_size=1, max_staleness=1, policy_mix=mix)
    fresh_trained = rollout(0, 0, version=0, n=8, sampled=4)
    fresh_trained.policy_ids[:] = np.where(fresh_trained.policy_ids >= 0, 0, -1)  # all "stale"
    fresh_trained.versions[4:6], fresh_trained.policy_ids[4:6] = 5, 1   # "current" at v5
    old_trained = rollout(1, 0, version=3)
    old_trained.policy_ids[:] = np.where(old_trained.policy_ids >= 0, 1, -1)  # "current" at v3
    for gid, r in enumerate([fresh_trained, old_trained]):
        buffer.open_group(gid, "t")
        buffer.add(r)
    taken = buffer.take(current_version=5)
    assert [g[0].group_id for g in taken.groups] == [0] and taken.discarded == 1
    assert buffer.stats.lags == [0]
    with pytest.raises(ValueError, match="not in the mix"):
        TrajectoryBuffer(group_size=1, policy_mix=PolicyMix.single("other"))


def test_take_reports_what_it_discarded():
    buffer = TrajectoryBuffer(group_size=2, max_staleness=0)
    groups = [[rollout(0, 0, version=4), rollout(0, 1, version=4)],            # kept
              [rollout(1, 0, version=3), rollout(1, 1, version=4)],            # stale
              [Rollout.failed("t", 0, 2, 0, "x"), Rollout.failed("t", 0, 2, 1, "x")],  # untrainable
              [rollout(3, 0, version=4), rollout(3, 1, version=4)]]            # beyond max_groups
    for gid, group in enumerate(groups):
        buffer.open_group(gid, "t")
        for r in group:
            buffer.add(r)
    taken = buffer.take(current_version=4, max_groups=1)
    assert [g[0].group_id for g in taken.groups] == [0] and taken.discarded == 0
    taken = buffer.take(current_version=4, max_groups=1)   # discards do not count to the cap
    assert [g[0].group_id for g in taken.groups] == [3] and taken.discarded == 2
    assert (buffer.stats.groups_dropped_stale, buffer.stats.groups_untrainable) == (1, 1)
    assert buffer.take(current_version=4) == ([], 0)


def test_report_metrics_gives_the_lags_since_the_last_report_then_resets_them():
    buffer = TrajectoryBuffer(group_size=1)
    for gid, version in enumerate([5, 4]):
        buffer.open_group(gid, "t")
        buffer.add(rollout(gid, 0, version=version))
    buffer.take(current_version=5)
    first = buffer.report_metrics()
    assert (first["lag_mean"], first["lag_max"], first["lag_frac_0"]) == (0.5, 1.0, 0.5)
    assert first["groups_dropped_stale"] == first["groups_untrainable"] == 0.0
    assert buffer.report_metrics() == {"groups_dropped_stale": 0.0, "groups_untrainable": 0.0}


def test_wait_for_returns_when_enough_groups_are_ready():
    async def go():
        buffer = TrajectoryBuffer(group_size=1)
        waiter = asyncio.create_task(buffer.wait_for(2))
        for gid in range(2):
            await asyncio.sleep(0)
            assert not waiter.done()
            buffer.open_group(gid, "t")
            buffer.add(rollout(gid, 0))
        await asyncio.wait_for(waiter, 5)
    asyncio.run(go())


# ---- StalenessGate ----------------------------------------------------------------------------

def test_gate_admits_at_most_staleness_versions_ahead():
    async def go():
        gate = StalenessGate(groups_per_step=2, max_staleness=1)
        # Version 0 with S=1: groups 0..3 (steps 0 and 1) may start, the fifth must wait.
        assert [await gate.admit() for _ in range(4)] == [0, 1, 2, 3]
        fifth = asyncio.create_task(gate.admit())
        await asyncio.sleep(0.01)
        assert not fifth.done()
        await gate.advance(1)
        assert await asyncio.wait_for(fifth, 5) == 4
    asyncio.run(go())


def test_try_admit_never_waits_and_shares_the_limit_with_admit():
    async def go():
        gate = StalenessGate(groups_per_step=2, max_staleness=1)   # version 0: groups 0..3
        # Started in this order: three waiting admits, three tries, three more admits.
        admits = [asyncio.create_task(gate.admit()) for _ in range(3)]
        tries = [asyncio.create_task(gate.try_admit()) for _ in range(3)]
        admits += [asyncio.create_task(gate.admit()) for _ in range(3)]
        assert await asyncio.gather(*tries) == [3, None, None]   # answered at once
        await asyncio.sleep(0.01)
        assert [t.result() for t in admits[:3]] == [0, 1, 2]
        assert not any(t.done() for t in admits[3:]) and gate.started == 4   # the limit
        await gate.advance(1)   # groups 4 and 5 may start: the waiting admits get them
        await asyncio.sleep(0.01)
        assert [t.result() for t in admits[3:5]] == [4, 5] and not admits[5].done()
        assert await gate.try_admit() is None and gate.started == 6
        await gate.release(1)   # a discarded group's admission comes back: one more may start
        await asyncio.sleep(0.01)
        assert admits[5].result() == 5 and await gate.try_admit() is None
    asyncio.run(go())


def test_an_external_source_waits_for_the_gate_counting_its_pending_groups():
    async def go():
        gate = StalenessGate(groups_per_step=2, max_staleness=0)   # version 0: groups 0..1
        pending = [2]   # two groups started elsewhere, not arrived
        waiting = asyncio.create_task(gate.wait_open(lambda: pending[0]))
        await asyncio.sleep(0.01)
        assert not waiting.done()
        pending[0] = 0   # they arrive: counted as started, the sum is unchanged
        gate.count_started(), gate.count_started()
        await gate.advance(1)
        await asyncio.wait_for(waiting, 5)
        assert gate.started == 2   # waiting took no number
    asyncio.run(go())


def test_gate_with_zero_staleness_is_lockstep():
    gate = StalenessGate(groups_per_step=3, max_staleness=0, started_groups=3, version=0)
    assert not gate.allowed()
    gate.version = 1
    assert gate.allowed()


# ---- prepare_batch ----------------------------------------------------------------------------

def _config(**kw):
    return ml_collections.ConfigDict({**advantages.default_config().to_dict(), **kw})


def test_failed_members_are_masked_not_scored():
    group = [rollout(0, 0, 1.0), rollout(0, 1, 0.0), Rollout.failed("t", 0, 0, 2, "boom")]
    batch = prepare_batch([group], _config(task_adv_norm=False), (8, 16), 16)
    assert batch.num_rollouts == 2
    # GRPO over the two valid members only: rewards 1 and 0, mean 0.5, unbiased std √0.5.
    adv = np.unique(batch.micro_batches[0].advantages[batch.micro_batches[0].loss_mask > 0])
    np.testing.assert_allclose(sorted(adv), [-0.5 / np.sqrt(0.5), 0.5 / np.sqrt(0.5)], rtol=1e-5)
    assert batch.metrics["status/task_error"] == pytest.approx(1 / 3)


def test_the_step_reports_the_tokens_it_computes_on():
    group = [rollout(0, 0, 1.0, n=6), rollout(0, 1, 0.0, n=11), rollout(0, 2, 0.0, n=4)]
    batch = prepare_batch([group], _config(task_adv_norm=False), (8, 16), 16)
    assert batch.metrics["num_loss_tokens"] == 3 * 3   # three sampled tokens each
    assert batch.metrics["num_input_tokens"] == 5 + 10 + 3   # each episode less its last token
    # Rows of 16 (the longest has 10 inputs): 10 + 5 in one row, 3 in a second.
    assert batch.metrics["num_row_tokens"] == 2 * 16


def test_incomplete_episodes_get_the_penalty():
    group = [rollout(0, 0, 1.0), rollout(0, 1, 1.0, status=SampleStatus.TASK_LIMIT_REACHED)]
    batch = prepare_batch([group], _config(task_adv_norm=False), (8,), 16)
    mb = batch.micro_batches[0]
    # Rewards become 1 and -0.2: the completed one has the positive advantage.
    by_first_token = {int(mb.tokens[r, 0]): mb.advantages[r, mb.loss_mask[r] > 0][0]
                      for r in range(mb.tokens.shape[0]) if mb.loss_mask[r].any()}
    assert by_first_token[0] > 0 > by_first_token[10]


def test_unknown_end_is_masked_not_penalised():
    # `unknown` is not the agent's doing (episode.py): it must not take the -0.2 penalty.
    group = [rollout(0, 0, 1.0), rollout(0, 1, 0.0),
             rollout(0, 2, 0.0, status=SampleStatus.UNKNOWN)]
    batch = prepare_batch([group], _config(task_adv_norm=False), (8, 16), 16)
    assert batch.num_rollouts == 2
    adv = np.unique(batch.micro_batches[0].advantages[batch.micro_batches[0].loss_mask > 0])
    np.testing.assert_allclose(sorted(adv), [-0.5 / np.sqrt(0.5), 0.5 / np.sqrt(0.5)], rtol=1e-5)


def test_training_masks_drop_untrainable_members_whatever_their_status():
    nothing_sampled = rollout(0, 1, 1.0, sampled=0)
    completed, valid = training_masks([
        rollout(0, 0, 1.0),
        nothing_sampled,
        rollout(0, 2, 1.0, status=SampleStatus.AGENT_INVALID_ACTION),
        rollout(0, 3, 1.0, status=SampleStatus.CANCELLED),
    ])
    assert completed == [True, True, False, False]
    assert valid == [True, False, True, False]


def test_tokens_after_the_last_sampled_one_are_not_packed():
    # An environment reply (4 unsampled tokens) that took the episode past the largest bucket
    # (8): the rollout still trains, on exactly its tokens up to the last sampled one.
    r = rollout(0, 0, 1.0, n=10, sampled=3)
    r.loss_mask[7:] = 0
    r.loss_mask[3:6] = 1
    batch = prepare_batch([[r, rollout(0, 1, 0.0)]], _config(task_adv_norm=False), (8,), 16)
    mb = batch.micro_batches[0]
    row = next(i for i in range(mb.tokens.shape[0]) if mb.tokens[i, 0] == 0)
    np.testing.assert_array_equal(mb.tokens[row, :5], r.tokens[:5])
    np.testing.assert_array_equal(mb.targets[row, :5], r.tokens[1:6])
    np.testing.assert_array_equal(mb.loss_mask[row, :5] > 0, r.loss_mask[1:6] > 0)
    assert batch.num_loss_tokens == 3 + 3


def test_nothing_trainable_gives_none():
    group = [Rollout.failed("t", 0, 0, m, "x") for m in range(2)]
    assert prepare_batch([group], _config(), (8,), 16) is None


def test_reward_variance_is_on_shaped_rewards_of_valid_members():
    cfg = _config()
    assert not has_reward_variance([rollout(0, 0, 1.0), rollout(0, 1, 1.0)], cfg)
    assert has_reward_variance([rollout(0, 0, 1.0), rollout(0, 1, 0.0)], cfg)
    # 0 (completed) vs −0.2 (turn limit): the penalty makes them differ.
    assert has_reward_variance(
        [rollout(0, 0, 0.0), rollout(0, 1, 0.0, status=SampleStatus.TASK_LIMIT_REACHED)], cfg)
    # A failed member is masked: one valid member left, no baseline, no variance.
    assert not has_reward_variance([rollout(0, 0, 1.0), Rollout.failed("t", 0, 0, 1, "x")], cfg)


def test_reward_variance_with_the_gated_penalty_needs_a_reward():
    cfg = _config(penalty_needs_reward=True)
    gave_up = rollout(0, 0, 0.0)
    ran_out = rollout(0, 1, 0.0, status=SampleStatus.TASK_LIMIT_REACHED)
    assert not has_reward_variance([gave_up, ran_out], cfg)
    assert has_reward_variance([rollout(0, 0, 0.5), ran_out], cfg)


# ---- dynamic sampling: the trainer's side of one step ----------------------------------------

def _pipeline(dynamic, max_draws, groups_per_step=2):
    cfg = runner.default_config()
    cfg.update(group_size=2, groups_per_step=groups_per_step, dynamic_sampling=dynamic,
               max_draws_per_step=max_draws, max_staleness=1)
    stream = curriculum.LearnabilityCurriculum(TaskStream({"t": list(range(10))}), prefer=1.0)
    agent = AgentSpec(tokenizer=None, sampling=SamplingParams())
    return runner.RLPipeline(cfg, client=None, engine=None, trainer=None, agent=agent,
                             stream=stream, adv_config=_config())


def _fill(pipeline, rewards_per_group):
    for gid, rewards in enumerate(rewards_per_group):
        pipeline.buffer.open_group(gid, "t")
        for member, reward in enumerate(rewards):
            r = rollout(gid, member, reward)
            r.index = gid
            pipeline.buffer.add(r)


def _collect(pipeline, started):
    async def go():
        gate = StalenessGate(groups_per_step=2, max_staleness=1, started_groups=started)
        draws = await pipeline._collect(0, gate)
        return draws, gate
    return asyncio.run(go())


def test_dynamic_sampling_discards_groups_without_variance_and_gives_admission_back():
    p = _pipeline(dynamic=True, max_draws=8)
    _fill(p, [(1, 1), (1, 0), (0, 0), (0, 1), (1, 0)])
    draws, gate = _collect(p, started=5)
    assert [g[0].group_id for g in draws.kept] == [1, 3, 4]   # every ready group is taken
    assert len(draws.drawn) == 5 and draws.discarded == 2
    assert gate.started == 3   # the two discarded groups' admissions came back
    # Every drawn group was observed, discarded or not (the curriculum needs the 0s and 1s).
    assert [p.stream.pass_rate("t", i) for i in range(5)] == [1.0, 0.5, 0.0, 0.5, 0.5]


def test_dynamic_sampling_stops_at_the_draw_bound():
    p = _pipeline(dynamic=True, max_draws=3)
    _fill(p, [(1, 1), (1, 0), (0, 0), (0, 1)])
    draws, _ = _collect(p, started=4)
    assert [g[0].group_id for g in draws.kept] == [1]   # fewer than groups_per_step
    assert len(draws.drawn) == 3
    assert p.buffer.num_ready == 1   # group 3 was not drawn: it is the next step's


def test_without_dynamic_sampling_every_group_is_kept():
    p = _pipeline(dynamic=False, max_draws=1)
    _fill(p, [(1, 1), (0, 0), (1, 0)])
    draws, gate = _collect(p, started=3)
    assert len(draws.kept) == 3 and draws.discarded == 0 and gate.started == 3
