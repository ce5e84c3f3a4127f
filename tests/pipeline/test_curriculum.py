"""The learnability curriculum: task shares kept, learnable indices preferred, exact resume."""

import collections
import json

import pytest

from agentrl_jax.data import TaskStream
from agentrl_jax.pipeline import curriculum

INDICES = {"a": list(range(6)), "b": list(range(100, 110))}


def make(prefer=1.0, window=2, seed=0):
    return curriculum.LearnabilityCurriculum(TaskStream(INDICES, seed=seed), prefer=prefer,
                                             window=window, seed=seed)


def test_running_pass_rate_is_over_the_last_window_groups():
    c = make(window=2)
    assert c.pass_rate("a", 1) is None
    c.observe("a", 1, [False, False])
    assert c.pass_rate("a", 1) == 0.0 and c.learnable("a") == []
    c.observe("a", 1, [True, False])
    assert c.pass_rate("a", 1) == 0.25 and c.learnable("a") == [1]
    c.observe("a", 1, [True, True])   # the first group leaves the window
    assert c.pass_rate("a", 1) == 0.75
    c.observe("a", 1, [True, True])
    assert c.pass_rate("a", 1) == 1.0 and c.learnable("a") == []   # solved: not learnable
    c.observe("a", 2, [])   # a group without a member that counts says nothing
    assert c.pass_rate("a", 2) is None


def test_draws_prefer_learnable_indices_and_tasks_keep_their_share():
    plain = TaskStream(INDICES, seed=0)
    c = make(prefer=1.0)
    c.observe("a", 4, [True, False])    # learnable
    c.observe("a", 5, [False, False])   # never solved
    c.observe("b", 107, [True, True])   # always solved
    plain_draws = [next(plain) for _ in range(40)]
    draws = [next(c) for _ in range(40)]
    # The task of every draw is the plain stream's.
    assert [t for t, _ in draws] == [t for t, _ in plain_draws]
    # Task a has one learnable index: with prefer=1 every draw of a goes to it.
    assert {i for t, i in draws if t == "a"} == {4}
    # Task b has none: its draws are the plain stream's.
    assert [i for t, i in draws if t == "b"] == [i for t, i in plain_draws if t == "b"]


def test_prefer_zero_is_the_plain_stream():
    plain = TaskStream(INDICES, seed=0)
    c = make(prefer=0.0)
    c.observe("a", 4, [True, False])
    assert [next(c) for _ in range(30)] == [next(plain) for _ in range(30)]


def test_half_preference_mixes_learnable_and_fresh_indices():
    c = make(prefer=0.5)
    c.observe("a", 4, [True, False])
    counts = collections.Counter(i for t, i in (next(c) for _ in range(200)) if t == "a")
    # About half the draws of a go to index 4 (59 of 100 here; ~17 without the preference),
    # and every index is still explored.
    assert counts[4] > 3 * max(n for i, n in counts.items() if i != 4) and len(counts) == 6


def test_resume_from_state_continues_exactly():
    def observe(c, draws):
        for k, (task, index) in enumerate(draws):
            c.observe(task, index, [k % 3 == 0, k % 2 == 0])

    first = make(prefer=0.7, window=3, seed=5)
    observe(first, [next(first) for _ in range(25)])
    state = json.loads(json.dumps(first.get_state()))   # as the checkpoint stores it
    expected = [next(first) for _ in range(10)]
    observe(first, expected)
    expected += [next(first) for _ in range(10)]

    resumed = make(prefer=0.7, window=3, seed=5)
    resumed.set_state(state)
    got = [next(resumed) for _ in range(10)]
    observe(resumed, got)
    got += [next(resumed) for _ in range(10)]
    assert got == expected
    assert resumed.get_state() == first.get_state()


def test_config_switch():
    config = curriculum.default_config()
    assert not config.enabled
    assert isinstance(curriculum.task_stream(INDICES, config, 0), TaskStream)
    config.enabled = True
    assert isinstance(curriculum.task_stream(INDICES, config, 0),
                      curriculum.LearnabilityCurriculum)
    with pytest.raises(ValueError):
        make(prefer=1.5)
