"""The interval math of the evaluation protocol, against values computed by hand.

z = Φ⁻¹(0.975) = 1.959964; t_{0.975, 4} = 2.776445 (any t table).
"""

import math

import numpy as np
import pytest

from agentrl_jax.evaluation import intervals


def test_wilson_at_zero_successes_is_not_degenerate():
    # k=0, n=40 (z² = 3.841459): centre = (z²/80) / (1 + z²/40) = 0.048018 / 1.096036
    # = 0.043811 = half.
    i = intervals.wilson(0, 40)
    assert i.estimate == 0.0 and i.low == 0.0
    assert i.high == pytest.approx(0.087622, abs=2e-6)
    assert not i.excludes_zero()


def test_wilson_at_one_half():
    # k=20, n=40: centre 0.5; half = z / 1.096036 · sqrt(0.25/40 + z²/6400)
    #           = 1.788229 · 0.082766 = 0.148005.
    i = intervals.wilson(20, 40)
    assert (i.low, i.high) == (pytest.approx(0.351995, abs=2e-6), pytest.approx(0.648005, abs=2e-6))
    assert i.n == 40


def test_wilson_rejects_impossible_counts_and_is_undefined_without_episodes():
    with pytest.raises(ValueError):
        intervals.wilson(3, 2)
    assert math.isnan(intervals.wilson(0, 0).low)


def test_mean_interval_is_students_t():
    # d = [1, 0, 0, 1, 1]: mean 0.6, s² = (3·0.16 + 2·0.36) / 4 = 0.3, s/√5 = 0.244949,
    # half = 2.776445 · 0.244949 = 0.680088.
    i = intervals.mean_interval([1, 0, 0, 1, 1])
    assert i.estimate == pytest.approx(0.6)
    assert (i.low, i.high) == (pytest.approx(-0.080088, abs=2e-6),
                               pytest.approx(1.280088, abs=2e-6))
    assert not i.excludes_zero()
    assert intervals.mean_interval([0.5, 0.5, 0.5]).to_json() == {
        "estimate": 0.5, "low": 0.5, "high": 0.5, "n": 3}


def test_one_observation_has_no_interval():
    i = intervals.mean_interval([1.0])
    assert i.estimate == 1.0 and math.isnan(i.low)
    assert i.to_json() == {"estimate": 1.0, "low": None, "high": None, "n": 1}
    assert not i.excludes_zero()


def test_paired_differences_match_indices_and_refuse_different_ones():
    d = intervals.paired_differences({"a": 0.0, "b": 1.0, "c": 0.5}, {"c": 1.0, "a": 1.0,
                                                                     "b": 1.0})
    np.testing.assert_array_equal(d, [1.0, 0.0, 0.5])   # in index order a, b, c
    with pytest.raises(ValueError, match="same indices"):
        intervals.paired_differences({"a": 0.0}, {"b": 0.0})


def test_mean_of_task_means_pools_variances_welch_satterthwaite():
    # Task A: d = [1,0,0,1,1], mean 0.6, v = 0.3/5 = 0.06. Task B: d = [0,0,0,0,1], mean 0.2,
    # s² = (4·0.04 + 0.64)/4 = 0.2, v = 0.04. D = 0.4, SE = sqrt(0.1)/2 = 0.158114,
    # df = 0.1² / (0.06²/4 + 0.04²/4) = 0.01 / 0.0013 = 7.6923, t_{0.975, 7.6923} = 2.322159,
    # half = 0.367166.
    i = intervals.mean_of_task_means([[1, 0, 0, 1, 1], [0, 0, 0, 0, 1]])
    assert i.estimate == pytest.approx(0.4) and i.n == 10
    assert (i.low, i.high) == (pytest.approx(0.032834, abs=2e-6),
                               pytest.approx(0.767166, abs=2e-6))
    assert i.excludes_zero()
    # Without variance the interval is the point; with a one-index task it is undefined.
    assert intervals.mean_of_task_means([[1, 1], [0, 0]]).to_json()["low"] == 0.5
    assert math.isnan(intervals.mean_of_task_means([[1, 0], [1]]).low)
