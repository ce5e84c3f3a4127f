"""The evaluation protocol: evenly spread test subsets, a validation slice RL never draws."""

import pytest

from agentrl_jax.evaluation import protocol


def test_evenly_spaced_takes_the_middle_of_equal_slices():
    assert protocol.evenly_spaced(list(range(10)), 2) == [2, 7]
    assert protocol.evenly_spaced(list(range(120)), 40) == list(range(1, 120, 3))
    picked = protocol.evenly_spaced(list(range(327)), 40)
    assert len(set(picked)) == 40 and picked[0] == 4 and picked[-1] == 322
    assert protocol.evenly_spaced(["a", "b"], 5) == ["a", "b"]   # shorter: all of it
    assert protocol.evenly_spaced(list(range(7)), 1) == [3]


def test_demonstrations_are_spread_over_the_train_split():
    assert protocol.demo_indices(list(range(100)), 4) == [12, 37, 62, 87]
    assert protocol.demo_indices(list(range(100)), 0) == []


def test_validation_slice_is_held_out_of_demonstrations_and_rl():
    train = list(range(10))
    demos = protocol.demo_indices(train, 2)
    assert demos == [2, 7]
    val = protocol.validation_indices(train, reserved=2, per_task=4)
    assert val == [1, 4, 6, 9]   # evenly over the 8 others: 0 1 3 4 5 6 8 9
    rl = protocol.rl_indices(train, reserved=2, per_task=4)
    assert rl == [0, 2, 3, 5, 7, 8] and not set(rl) & set(val)
    assert set(demos) <= set(rl)   # the demonstrations' indices stay trainable in RL


def test_string_indices():
    train = [f"s{i}" for i in range(10)]
    assert protocol.rl_indices(train, reserved=0, per_task=2) == [
        f"s{i}" for i in range(10) if i not in (2, 7)]


def test_selection_is_each_subset_as_a_function_of_the_split():
    split = list(range(100))
    assert protocol.selection("test", 4)(split) == protocol.test_indices(split, 4) == [
        12, 37, 62, 87]
    assert protocol.selection("test")(split) == split   # per_task None: every index
    # The 4 demonstrations take 12, 37, 62, 87; the validation slice spreads over the 96 others.
    assert protocol.selection("validation", 4, reserved=4)(split) == [13, 38, 63, 88]
    assert protocol.selection("validation", reserved=40)(split) == protocol.validation_indices(
        split, 40, protocol.VALIDATION_PER_TASK)
    with pytest.raises(ValueError, match="unknown evaluation subset 'train'"):
        protocol.selection("train")
