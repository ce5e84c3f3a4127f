"""The evaluation protocol: evenly spread test subsets, a validation slice RL never draws."""

from agentrl_jax.evaluation import protocol


def test_evenly_spaced_takes_the_middle_of_equal_slices():
    assert protocol.evenly_spaced(list(range(10)), 2) == [2, 7]
    assert protocol.evenly_spaced(list(range(120)), 40) == list(range(1, 120, 3))
    picked = protocol.evenly_spaced(list(range(327)), 40)
    assert len(set(picked)) == 40 and picked[0] == 4 and picked[-1] == 322
    assert protocol.evenly_spaced(["a", "b"], 5) == ["a", "b"]   # shorter: all of it
    assert protocol.evenly_spaced(list(range(7)), 1) == [3]


def test_validation_slice_is_held_out_of_demonstrations_and_rl():
    train = list(range(100))
    val = protocol.validation_indices(train, reserved=40, per_task=4)
    assert val == [47, 62, 77, 92]   # evenly over 40..99
    rl = protocol.rl_indices(train, reserved=40, per_task=4)
    assert len(rl) == 96 and not set(rl) & set(val)
    assert rl[:40] == list(range(40))   # the demonstrations' indices stay trainable in RL


def test_string_indices():
    train = [f"s{i}" for i in range(10)]
    assert protocol.rl_indices(train, reserved=0, per_task=2) == [
        f"s{i}" for i in range(10) if i not in (2, 7)]
