"""Advantages against hand-computed numbers (and torch's unbiased std on random data)."""

import ml_collections
import numpy as np
import pytest
import torch

from agentrl_jax.rl import advantages as adv_lib

EPS = 1e-6
SQRT3 = np.sqrt(1.0 / 3.0)  # unbiased std of {1, 0, 0, 1} and of {1, 0, 0}


def test_shape_rewards_penalty_and_masking():
    rewards = [1.0, 0.7, 0.0, 0.5, 0.3, 0.9]
    # completed, turn limit, context limit, cancelled, task error, a completed but dropped member
    completed = [True, False, False, False, False, True]
    valid = [True, True, True, False, False, False]
    shaped, w = adv_lib.shape_rewards(rewards, completed, valid, incomplete_penalty=-0.2)
    np.testing.assert_allclose(shaped, [1.0, -0.2, -0.2, 0.0, 0.0, 0.0])
    np.testing.assert_array_equal(w, [1, 1, 1, 0, 0, 0])


def test_shape_rewards_penalty_is_configurable():
    shaped, w = adv_lib.shape_rewards([1.0], [False], [True], incomplete_penalty=-0.5)
    np.testing.assert_allclose(shaped, [-0.5])
    np.testing.assert_array_equal(w, [1])


def test_shape_rewards_rejects_masks_of_another_length():
    with pytest.raises(ValueError, match="one \\[N\\]"):
        adv_lib.shape_rewards([1.0, 0.0], [True], [True, True])


def test_shape_rewards_takes_one_penalty_per_trajectory():
    shaped, _ = adv_lib.shape_rewards([0.0, 0.0, 1.0], [False, False, True], [True] * 3,
                                      incomplete_penalty=np.array([-0.2, 0.0, -0.2]))
    np.testing.assert_allclose(shaped, [-0.2, 0.0, 1.0])
    with pytest.raises(ValueError, match="one per reward"):
        adv_lib.shape_rewards([0.0], [False], [True], incomplete_penalty=np.array([0.0, 0.0]))


def _gated(on: bool) -> ml_collections.ConfigDict:
    cfg = adv_lib.default_config()
    cfg.penalty_needs_reward = on
    return cfg


def test_incomplete_penalties_gate_on_a_rewarded_member_of_the_group():
    # group 0: a completed member with reward 0.4; group 1: completed 0 and a turn limit;
    # group 2: the only positive reward is on an incomplete member (not earned);
    # group 3: the only positive reward is on a masked member (not counted).
    rewards = [0.4, 0.0, 0.0, 0.0, 0.9, 0.0, 1.0, 0.0]
    completed = [True, False, True, False, False, True, True, False]
    valid = [True, True, True, True, True, True, False, True]
    groups = np.array([0, 0, 1, 1, 2, 2, 3, 3])
    np.testing.assert_allclose(
        adv_lib.incomplete_penalties(rewards, completed, valid, groups, _gated(True)),
        [-0.2, -0.2, 0, 0, 0, 0, 0, 0])
    np.testing.assert_allclose(
        adv_lib.incomplete_penalties(rewards, completed, valid, groups, _gated(False)),
        [-0.2] * 8)


def test_gated_penalty_makes_giving_up_equal_to_a_real_attempt():
    """A group that earned nothing: an early wrong answer (completed, 0) against two that ran
    out of turns. Penalised, the give-up gets the positive advantage; gated, nobody does."""
    rewards, completed, valid = [0.0, 0.0, 0.0], [True, False, False], [True] * 3
    groups, tasks, ntok = np.zeros(3, int), np.zeros(3, int), np.ones(3)
    adv, _ = adv_lib.compute_advantages(rewards, completed, valid, groups, tasks, ntok,
                                        _gated(False))
    assert adv[0] > 0 > adv[1] == adv[2]
    adv, _ = adv_lib.compute_advantages(rewards, completed, valid, groups, tasks, ntok,
                                        _gated(True))
    np.testing.assert_array_equal(adv, [0.0, 0.0, 0.0])
    # Once a member succeeds, the penalty is back: success > give-up > ran out of turns.
    adv, _ = adv_lib.compute_advantages([1.0, 0.0, 0.0, 0.0], [True, True, False, False],
                                        [True] * 4, np.zeros(4, int), np.zeros(4, int),
                                        np.ones(4), _gated(True))
    assert adv[0] > adv[1] > adv[2] == adv[3]


def test_grpo_hand_computed():
    r = np.array([1.0, 0.0, 0.0, 1.0, 3.0, 1.0])
    g = np.array([7, 7, 7, 7, 9, 9])
    a = adv_lib.grpo_advantages(r, g, eps=EPS)
    # group 7: mean 0.5, std sqrt(1/3); group 9: mean 2, std sqrt(2)
    s7 = 0.5 / (SQRT3 + EPS)
    s9 = 1.0 / (np.sqrt(2.0) + EPS)
    np.testing.assert_allclose(a, [s7, -s7, -s7, s7, s9, -s9], rtol=1e-12)


def test_grpo_masked_member_excluded_from_stats():
    r = np.array([1.0, 0.0, 0.0, 1.0])
    w = np.array([1.0, 1.0, 1.0, 0.0])
    a = adv_lib.grpo_advantages(r, np.zeros(4, int), w, eps=EPS)
    # valid {1, 0, 0}: mean 1/3, unbiased std sqrt(1/3)
    np.testing.assert_allclose(
        a, [(2 / 3) / (SQRT3 + EPS), (-1 / 3) / (SQRT3 + EPS), (-1 / 3) / (SQRT3 + EPS), 0.0]
    )


def test_grpo_all_equal_singleton_and_empty_groups():
    r = np.array([0.5, 0.5, 0.5, 1.0, 2.0, 2.0])
    g = np.array(["a", "a", "a", "b", "c", "c"])
    w = np.array([1, 1, 1, 1, 0, 0])
    a = adv_lib.grpo_advantages(r, g, w)
    # all equal -> 0; singleton -> 0 (no baseline); all-masked group -> 0
    np.testing.assert_array_equal(a, np.zeros(6))


def test_grpo_matches_torch_unbiased_std():
    rng = np.random.default_rng(0)
    r = rng.normal(size=(5, 8))
    a = adv_lib.grpo_advantages(r.ravel(), np.repeat(np.arange(5), 8), eps=EPS).reshape(5, 8)
    t = torch.tensor(r)
    ref = (t - t.mean(-1, keepdim=True)) / (t.std(-1, keepdim=True) + EPS)
    np.testing.assert_allclose(a, ref.numpy(), rtol=1e-12)


def test_zero_variance_mask():
    r = np.array([1.0, 1.0, 0.0, 1.0, 0.0, 5.0])
    g = np.array([0, 0, 1, 1, 2, 2])
    w = np.array([1, 1, 1, 1, 1, 0])
    keep = adv_lib.zero_variance_group_mask(r, g, w)
    # group 0 all equal; group 1 varies; group 2 has one valid member
    np.testing.assert_array_equal(keep, [0, 0, 1, 1, 0, 0])


def test_task_normalize_token_weighted():
    # task "a": A = [1, -1] with 3 and 1 loss tokens -> tokens {1,1,1,-1}: mean 0.5,
    # unbiased var (3 * 0.25 + 2.25) / 3 = 1. Task "b": a single one-token trajectory.
    a = np.array([1.0, -1.0, 4.0])
    tasks = np.array(["a", "a", "b"])
    counts = np.array([3, 1, 1])
    out = adv_lib.task_normalize(a, tasks, counts, eps=EPS)
    np.testing.assert_allclose(out, [0.5 / (1 + EPS), -1.5 / (1 + EPS), 0.0])


def test_task_normalize_token_level_equals_trajectory_level():
    rng = np.random.default_rng(1)
    n, t = 6, 5
    a = rng.normal(size=n)
    mask = (rng.random((n, t)) < 0.6).astype(float)
    mask[:, 0] = 1.0
    tasks = np.array([0, 1, 0, 1, 1, 0])
    per_traj = adv_lib.task_normalize(a, tasks, mask.sum(1))
    per_tok = adv_lib.task_normalize(np.repeat(a[:, None], t, 1), tasks, mask)
    np.testing.assert_allclose(per_tok, per_traj[:, None] * mask, rtol=1e-12)
    # and the same as torch over the concatenated masked tokens of each task
    for task in (0, 1):
        toks = torch.tensor(np.repeat(a[:, None], t, 1)[tasks == task][mask[tasks == task] > 0])
        ref = (toks - toks.mean()) / (toks.std() + 1e-6)
        np.testing.assert_allclose(per_tok[tasks == task][mask[tasks == task] > 0], ref.numpy())


def test_task_normalize_one_task_zero_weight_rows():
    a = np.array([2.0, 0.0, 9.0])
    out = adv_lib.task_normalize(a, np.zeros(3, int), np.array([1, 1, 0]), eps=0.0)
    # tokens {2, 0}: mean 1, std sqrt(2)
    np.testing.assert_allclose(out, [1 / np.sqrt(2), -1 / np.sqrt(2), 0.0])


@pytest.mark.parametrize("filter_zero_variance", [False, True])
def test_compute_advantages_pipeline(filter_zero_variance):
    cfg = adv_lib.default_config()
    cfg.filter_zero_variance = filter_zero_variance
    rewards = [1.0, 0.0, 1.0, 0.3, 0.0, 0.0]
    # completed, completed, turn limit, task error, completed, completed
    completed = [True, True, False, False, True, True]
    valid = [True, True, True, False, True, True]
    groups = np.array([0, 0, 0, 0, 1, 1])
    tasks = np.array(["os", "os", "os", "os", "db", "db"])
    ntok = np.array([2, 2, 2, 2, 3, 3])
    adv, w = adv_lib.compute_advantages(rewards, completed, valid, groups, tasks, ntok, cfg)
    # group 0 shaped {1, 0, -0.2} (4th masked): mean 0.8/3, hand-computed std below
    r = np.array([1.0, 0.0, -0.2])
    grpo = (r - r.mean()) / (r.std(ddof=1) + EPS)
    # task "os": 2 tokens each, z-score over {g0,g0,g1,g1,g2,g2}
    toks = np.repeat(grpo, 2)
    expect_os = (grpo - toks.mean()) / (toks.std(ddof=1) + EPS)
    np.testing.assert_allclose(adv[:3], expect_os, rtol=1e-9)
    assert adv[3] == 0.0 and w[3] == 0.0
    # task "db": one group, all equal -> GRPO 0 -> task std 0 -> 0; filtered out if asked
    np.testing.assert_array_equal(adv[4:], [0.0, 0.0])
    np.testing.assert_array_equal(w[4:], [0.0, 0.0] if filter_zero_variance else [1.0, 1.0])


def test_compute_advantages_without_task_norm_is_grpo():
    cfg = ml_collections.ConfigDict(adv_lib.default_config().to_dict())
    cfg.task_adv_norm = False
    adv, _ = adv_lib.compute_advantages(
        [1.0, 0.0], [True, True], [True, True], np.array([0, 0]), np.array([0, 0]),
        np.array([1, 1]), cfg,
    )
    s = 0.5 / (np.sqrt(0.5) + EPS)
    np.testing.assert_allclose(adv, [s, -s])
