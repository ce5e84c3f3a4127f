"""Per-episode outcomes, intervals in the results, the paired before/after comparison."""

import asyncio
import json

import numpy as np
import pytest

from agentrl_jax.episode import SampleStatus
from agentrl_jax.evaluation import agentbench
from agentrl_jax.rollout.record import Rollout


def rollout(index, success, status="completed"):
    empty = np.zeros(0, np.int32)
    return Rollout("db-test", index, 0, 0, empty, empty, np.zeros(0, np.float32), empty, empty,
                   reward=1.0 if success else 0.0, status=SampleStatus(status))


def task_json(passes):
    """passes: per pass, a list of (index, success)."""
    result = agentbench.summarize_task("db-test", [[rollout(i, s) for i, s in p] for p in passes])
    return json.loads(json.dumps(agentbench.to_json({"db-test": result})))["tasks"]


def test_outcomes_and_success_interval_are_recorded():
    tasks = task_json([[(0, 1), (1, 0)], [(0, 1), (1, 1)]])
    db = tasks["db-test"]
    assert [(o["index"], o["run"], o["success"]) for o in db["outcomes"]] == [
        (0, 0, 1), (1, 0, 0), (0, 1, 1), (1, 1, 1)]
    assert db["success_interval"]["estimate"] == 0.75 and db["success_interval"]["n"] == 4
    assert agentbench.success_by_index(db) == {"0": 1.0, "1": 0.5}


def test_paired_comparison_per_task_and_mean():
    # Index successes before [0,1,1,0,0] and after [1,1,1,1,1]: d = [1,0,0,1,1] (see
    # test_intervals: mean 0.6, interval [-0.080088, 1.280088]).
    before = task_json([list(enumerate([0, 1, 1, 0, 0]))])
    after = task_json([list(enumerate([1, 1, 1, 1, 1]))])
    out = agentbench.paired_comparison(before, after)
    db = out["tasks"]["db-test"]
    assert db["estimate"] == pytest.approx(0.6)
    assert db["low"] == pytest.approx(-0.080088, abs=2e-6)
    assert out["mean"]["estimate"] == pytest.approx(0.6) and out["significant"] is False
    with pytest.raises(ValueError, match="same indices"):
        agentbench.paired_comparison(before, task_json([[(7, 1)]]))


def test_interval_formatting():
    assert agentbench.format_interval({"low": 0.1, "high": 0.25}) == "[10.0, 25.0]"
    assert agentbench.format_interval({"low": None, "high": None}) == "[–]"


def test_episodes_are_queued_one_task_at_a_time_in_turn(monkeypatch):
    started = []

    async def fake_episode(client, generator, agent, task, index, **_):
        started.append((task, index))
        return rollout(index, True)

    monkeypatch.setattr(agentbench, "run_episode", fake_episode)
    results = asyncio.run(agentbench.play(None, None, None, {"kg": [7, 8, 9], "db": [1, 2]},
                                          concurrency=1))
    assert started == [("db", 1), ("kg", 7), ("db", 2), ("kg", 8), ("kg", 9)]
    assert sorted(results) == ["db", "kg"]
    assert [o["index"] for o in results["kg"].outcomes] == [7, 8, 9]


def test_finished_episodes_count_in_place_and_the_rest_keep_their_seeds(monkeypatch):
    """An evaluation resumed from its journal plays only what is missing, each remaining
    episode with the seed it had, and summarises as if played in one go."""
    seeds = {}

    async def fake_episode(client, generator, agent, task, index, rng, **_):
        seeds[(task, index)] = rng.random()
        return rollout(index, True)

    monkeypatch.setattr(agentbench, "run_episode", fake_episode)
    tasks = {"kg": [7, 8, 9], "db": [1, 2]}
    whole = asyncio.run(agentbench.play(None, None, None, tasks, concurrency=1))
    first_seeds, seeds = dict(seeds), {}
    earlier = rollout(8, False)   # kg's index 8, played before the stop, and failed
    earlier.task = "kg"
    resumed = asyncio.run(agentbench.play(None, None, None, tasks, concurrency=1,
                                          finished=[earlier]))
    assert ("kg", 8) not in seeds and len(seeds) == 4
    assert all(seeds[key] == first_seeds[key] for key in seeds)
    assert [(o["index"], o["success"]) for o in resumed["kg"].outcomes] == [(7, 1), (8, 0), (9, 1)]
    assert resumed["db"].outcomes == whole["db"].outcomes
