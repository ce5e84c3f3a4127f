"""Choosing the RL checkpoint on validation: which steps are compared, which one wins."""

from __future__ import annotations

import pytest

from agentrl_jax.experiment import selection


def test_candidates_are_every_nth_step_and_the_last():
    assert selection.candidate_steps(20, 5) == [5, 10, 15, 20]
    assert selection.candidate_steps(12, 5) == [5, 10, 12]
    assert selection.candidate_steps(3, 5) == [3]
    assert selection.candidate_steps(4, 1) == [1, 2, 3, 4]
    with pytest.raises(ValueError):
        selection.candidate_steps(10, 0)


def test_the_best_validation_success_wins_and_a_tie_goes_to_the_later_step():
    assert selection.best_step({5: 0.40, 10: 0.55, 15: 0.31, 20: 0.50}) == 10
    assert selection.best_step({5: 0.55, 10: 0.40, 15: 0.55}) == 15
    with pytest.raises(ValueError):
        selection.best_step({})
