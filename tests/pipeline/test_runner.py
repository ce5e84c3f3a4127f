"""The RL pipeline end to end: real controller and echo workers over HTTP, the real JAX
sampling engine and trainer on a tiny model with SmolLM2's tokenizer."""

import asyncio

import jax
import numpy as np
import pytest

from agentrl_jax.controller.client import ControllerClient
from agentrl_jax.pipeline import curriculum, runner
from agentrl_jax.pipeline.batching import has_reward_variance
from agentrl_jax.rl import advantages
from tests.support.pipeline_stack import pipeline_configs


def _run(stack, fleet, tokenizer, mode, on_progress=None, **kw):
    engine, trainer = stack
    pcfg, agent = pipeline_configs(tokenizer, mode, **kw)
    reports = []

    async def go():
        async with ControllerClient(fleet.url, start_jitter_s=0) as client:
            stream = curriculum.task_stream({"echo": await client.get_indices("echo")},
                                            pcfg.curriculum, seed=0)
            pipeline = runner.RLPipeline(
                pcfg, client=client, engine=engine, trainer=trainer, agent=agent,
                stream=stream, adv_config=advantages.default_config(), on_step=reports.append,
                on_progress=on_progress)
            state = await pipeline.run(trainer.init_state(0))
            return state, await engine.policies(), pipeline

    state, policies, pipeline = asyncio.run(go())
    return state, policies, pipeline, reports, trainer


@pytest.mark.parametrize("mode", ["async", "sync"])
def test_pipeline_trains_and_syncs_weights(stack, fleet, tokenizer, mode):
    state, policies, pipeline, reports, trainer = _run(stack, fleet, tokenizer, mode)
    assert [r.step for r in reports] == [1, 2, 3]
    assert int(state.step) == 3 and policies["current"] == 3
    for report in reports:
        assert report.metrics["num_rollouts"] >= 4  # at least groups_per_step × group_size
        assert np.isfinite(report.metrics["grad_norm"])
        # the sampler's prefill work over the step, the shared-prefix cache's part in it
        m = report.metrics
        assert m["sampler_prefill_tokens_requested"] > 0
        assert m["sampler_prefill_tokens_requested"] == (
            m["sampler_prefill_tokens_computed"] + m["sampler_prefill_tokens_reused"])
        # padding included, every computed token is a position of some prefill call
        assert m["sampler_prefill_positions_computed"] >= m["sampler_prefill_tokens_computed"]
        assert 0 <= m["sampler_prefix_cache_hit_rate"] <= 1
        for r in report.rollouts:
            sampled = r.versions[r.loss_mask > 0]
            if mode == "sync":  # lockstep: every token from the weights of the step before
                assert set(sampled.tolist()) <= {report.step - 1}
            else:  # bounded staleness
                assert sampled.size == 0 or report.step - 1 - sampled.min() <= 1
    # No group was trained twice, and the bookkeeping knows how many were drawn.
    trained = [(r.group_id, r.member) for rep in reports for r in rep.rollouts]
    assert len(trained) == len(set(trained))
    assert reports[-1].bookkeeping["next_group_id"] >= 6
    # The sessions we ended ourselves were cancelled at the controller: nothing left running.
    fleet.wait_for(lambda: all(s["status"] != "running" for s in fleet.sessions().values()))
    # No recompilation of the train step after the first trace with one bucket.
    assert trainer.num_traces == 1


@pytest.mark.parametrize("mode", ["async", "sync"])
def test_dynamic_sampling_and_curriculum_in_a_run(stack, fleet, tokenizer, mode):
    _, _, pipeline, reports, _ = _run(stack, fleet, tokenizer, mode, dynamic_sampling=True,
                                      max_draws_per_step=4,
                                      curriculum=dict(enabled=True, prefer=0.5, window=16))
    assert [r.step for r in reports] == [1, 2, 3]
    advantages_config = advantages.default_config()
    for report in reports:
        m = report.metrics
        assert 1 <= m["groups_drawn"] <= 4
        groups = {}
        for r in report.rollouts:
            groups.setdefault(r.group_id, []).append(r)
        assert m["groups_discarded_no_variance"] == m["groups_drawn"] - len(groups)
        assert all(has_reward_variance(g, advantages_config) for g in groups.values())
        # The episode statistics cover every drawn group, trained or discarded.
        assert m["num_rollouts"] == 2 * m["groups_drawn"]
        if len(groups) < 2:   # fewer than groups_per_step with variance: only at the bound
            assert m["groups_drawn"] == 4
    # Every drawn group was observed by the curriculum, and its state is in the bookkeeping.
    history = reports[-1].bookkeeping["stream_state"]["history"]
    observed = sum(len(groups) for _, _, groups in history)
    assert observed == sum(r.metrics["groups_drawn"] for r in reports)
    if mode == "sync":   # (async workers may have drawn on after the last step)
        assert pipeline.stream.get_state() == reports[-1].bookkeeping["stream_state"]


@pytest.mark.parametrize("mode", ["async", "sync"])
def test_progress_within_each_step(stack, fleet, tokenizer, mode):
    """A step reports its episodes as they finish, its groups as it takes them, and its
    phases in order, ending with what its metrics say it drew and kept."""
    progress = []
    _, _, _, reports, _ = _run(stack, fleet, tokenizer, mode, on_progress=progress.append,
                               dynamic_sampling=True, max_draws_per_step=4)
    assert [r.step for r in reports] == [1, 2, 3]
    for report in reports:
        events = [p for p in progress if p.step == report.step]
        phases = [p.phase for p in events]
        assert phases[0] == runner.ROLLOUTS and phases[-1] == runner.SYNCING
        # rollouts, then (unless skipped) training, then syncing: never back
        order = [runner.STEP_PHASES.index(p) for p in phases]
        assert order == sorted(order)
        assert (runner.TRAINING in phases) == ("skipped_step" not in report.metrics)
        episodes = [p.episodes for p in events if p.phase == runner.ROLLOUTS]
        assert episodes == sorted(episodes)
        last = events[-1]
        if mode == "sync":   # nothing runs ahead: the step played exactly what it drew
            assert episodes[-1] == 2 * report.metrics["groups_drawn"]
        assert last.drawn == report.metrics["groups_drawn"]
        assert last.drawn - last.kept == report.metrics["groups_discarded_no_variance"]


def test_cross_policy_pool_uses_and_refreshes_the_stale_snapshot(stack, fleet, tokenizer):
    _, policies, _, reports, _ = _run(stack, fleet, tokenizer, "async", stale_ratio=0.5, steps=4)
    assert policies == {"current": 4, "stale": 4}  # refreshed at steps 2 and 4
    assert [r.metrics["stale_refreshed"] for r in reports] == [0.0, 1.0, 0.0, 1.0]
    ids = np.concatenate([r.policy_ids[r.loss_mask > 0] for rep in reports for r in rep.rollouts])
    assert set(ids.tolist()) == {0, 1}  # tokens from both policies were trained on


def test_async_with_zero_staleness_equals_sync(stack, fleet, tokenizer):
    """Same seeds, same draws: lockstep async must give exactly what the sync loop gives."""
    sync_state, _, _, sync_reports, _ = _run(stack, fleet, tokenizer, "sync", steps=2)
    async_state, _, _, async_reports, _ = _run(stack, fleet, tokenizer, "async", steps=2,
                                               max_staleness=0)

    def trained(reports):
        return [sorted((r.group_id, r.member, r.tokens.tolist()) for r in rep.rollouts)
                for rep in reports]

    assert trained(async_reports) == trained(sync_reports)
    for a, b in zip(jax.tree.leaves(async_state.params), jax.tree.leaves(sync_state.params),
                    strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


@pytest.mark.parametrize("learnability", [False, True])
def test_resume_from_checkpoint_never_retrains_a_group(stack, fleet, tokenizer, tmp_path,
                                                       learnability):
    """Train 2 steps with a checkpoint per step, 'kill', resume from it to step 4."""
    from agentrl_jax.checkpoint import CheckpointManager

    engine, trainer = stack
    restored = []

    async def run(steps, manager, resume):
        pcfg, agent = pipeline_configs(tokenizer, "async", steps=steps,
                               curriculum=dict(enabled=learnability, prefer=0.5, window=16))
        reports = []

        async def on_step(report):
            reports.append(report)
            manager.save(report.step, report.state, bookkeeping=report.bookkeeping)

        async with ControllerClient(fleet.url, start_jitter_s=0) as client:
            stream = curriculum.task_stream({"echo": await client.get_indices("echo")},
                                            pcfg.curriculum, seed=0)
            state, book, start = trainer.init_state(0), None, 0
            if resume:
                state, book = manager.restore(state)
                stream.set_state(book["stream_state"])
                restored.append((book["stream_state"], stream.get_state()))
                start = manager.latest_step()
            pipeline = runner.RLPipeline(
                pcfg, client=client, engine=engine, trainer=trainer, agent=agent, stream=stream,
                adv_config=advantages.default_config(), on_step=on_step, bookkeeping=book)
            state = await pipeline.run(state, start_step=start)
        manager.wait_until_finished()
        return state, reports

    with CheckpointManager(tmp_path / "ckpt", max_to_keep=2) as manager:
        _, first = asyncio.run(run(2, manager, resume=False))
    with CheckpointManager(tmp_path / "ckpt", max_to_keep=2) as manager:
        assert manager.latest_step() == 2
        state, second = asyncio.run(run(4, manager, resume=True))
    assert [r.step for r in second] == [3, 4] and int(state.step) == 4
    before = {r.group_id for rep in first for r in rep.rollouts}
    after = {r.group_id for rep in second for r in rep.rollouts}
    assert not before & after
    # Group ids continue past everything drawn before the checkpoint, trained or in flight.
    assert min(after) >= first[-1].bookkeeping["next_group_id"]
    assert second[-1].bookkeeping["rollouts_trained"] > first[-1].bookkeeping["rollouts_trained"]
    # The stream (with the curriculum: its pass rates too) resumed as checkpointed.
    ((saved, resumed),) = restored
    assert resumed == saved == first[-1].bookkeeping["stream_state"]
    if learnability:
        assert saved["history"] and len(second[-1].bookkeeping["stream_state"]["history"]) >= len(
            saved["history"])
