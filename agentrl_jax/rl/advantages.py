"""Outcome advantages: episode rewards -> per-trajectory (and per-token) advantages.

The pipeline, in order (AgentRL `agentrl_trainer.py`, reference notes section 4):

1. `shape_rewards`: an episode that did not complete has its reward overridden by a penalty
   (-0.2); an invalid one (it failed for reasons outside the agent's control, or left nothing
   to train on) gets weight 0, i.e. is masked out, not scored. Which statuses are which is
   `agentrl_jax.episode.training_treatment`'s; this module sees only the two masks.
2. `grpo_advantages`: A_g = (R_g - mean_group R) / (std_group R + eps) over the valid members of
   each group (the G rollouts of one (task, index)), std unbiased as in torch.
3. optional `zero_variance_group_mask`: drop groups whose valid rewards are all equal (they carry
   no GRPO signal and would only dilute the token mean).
4. `task_normalize`: per task i, z-score over the loss-masked token advantages of that task.

Everything here runs on the host, once per batch, on small arrays: plain numpy, pure functions.
"""

from __future__ import annotations

from collections.abc import Sequence

import ml_collections
import numpy as np


def default_config() -> ml_collections.ConfigDict:
    """Advantage settings; the defaults are AgentRL's released configs."""
    return ml_collections.ConfigDict(
        dict(
            incomplete_penalty=-0.2,
            # True: the penalty applies only in groups where some episode earned a reward
            # (`incomplete_penalties`); off in AgentRL's configs.
            penalty_needs_reward=False,
            eps=1e-6,
            task_adv_norm=True,
            filter_zero_variance=False,
        )
    )


def shape_rewards(
    rewards: Sequence[float] | np.ndarray,
    completed: Sequence[bool] | np.ndarray,
    valid: Sequence[bool] | np.ndarray,
    incomplete_penalty: float | np.ndarray = -0.2,
) -> tuple[np.ndarray, np.ndarray]:
    """Applies the incomplete-episode penalty and masks invalid episodes.

    R'_g = 0                     if not valid_g
         = R_g                   if completed_g
         = incomplete_penalty_g  otherwise (context limit, invalid action, turn limit, ...)
    w_g  = 1[valid_g]

    `incomplete_penalty` is one value for all, or one per trajectory (`incomplete_penalties`).

    A masked episode keeps R' = 0 so it cannot leak into any statistic by accident; every
    downstream function also ignores it through w.

    Args:
      rewards: [N] the environment's rewards.
      completed: [N] whether the reward is kept (`episode.Treatment.SCORED`).
      valid: [N] whether the episode enters the batch at all (not `episode.Treatment.MASKED`,
        and something was sampled).
    Returns:
      (rewards [N] float64, weights [N] float64 in {0, 1}).
    """
    rewards = np.asarray(rewards, dtype=np.float64)
    completed = np.asarray(completed, dtype=bool)
    masked = ~np.asarray(valid, dtype=bool)
    if np.ndim(incomplete_penalty) and np.shape(incomplete_penalty) != rewards.shape:
        raise ValueError(f"incomplete_penalty {np.shape(incomplete_penalty)} must be a scalar "
                         f"or one per reward {rewards.shape}")
    if not rewards.shape == completed.shape == masked.shape == (len(rewards),):
        raise ValueError(f"rewards {rewards.shape}, completed {completed.shape} and valid "
                         f"{masked.shape} must be one [N] each")
    shaped = np.where(completed, rewards, incomplete_penalty)
    shaped = np.where(masked, 0.0, shaped)
    return shaped, (~masked).astype(np.float64)


def incomplete_penalties(
    rewards: Sequence[float] | np.ndarray,
    completed: Sequence[bool] | np.ndarray,
    valid: Sequence[bool] | np.ndarray,
    group_ids: np.ndarray,
    config: ml_collections.ConfigDict,
) -> np.ndarray:
    """The penalty each trajectory gets if it did not complete, as `shape_rewards` takes it.

    p_g = incomplete_penalty                      without `penalty_needs_reward`
        = incomplete_penalty * 1[exists h in G(g): valid_h, completed_h, R_h > 0]   with it

    Why the gate: with the penalty everywhere, a policy that succeeds nowhere learns that
    committing a trivially wrong answer early (completed, R = 0) beats a real attempt that
    runs out of turns (R' = incomplete_penalty). Gated, the two are equal until some member of
    the group earns a reward, so such a group has no variance and teaches nothing; where a
    reward exists, finishing matters again, as in AgentRL.
    """
    n = len(rewards)
    if not config.penalty_needs_reward:
        return np.full(n, float(config.incomplete_penalty))
    rewarded = (np.asarray(rewards, np.float64) > 0) & np.asarray(completed, bool) \
        & np.asarray(valid, bool)
    seg, num = _segment_ids(group_ids)
    group_rewarded = np.bincount(seg, weights=rewarded.astype(np.float64), minlength=num) > 0
    return np.where(group_rewarded[seg], float(config.incomplete_penalty), 0.0)


def _segment_ids(keys: np.ndarray) -> tuple[np.ndarray, int]:
    """Dense ids 0..K-1 for arbitrary (int or str) keys."""
    _, inverse = np.unique(np.asarray(keys), return_inverse=True)
    inverse = inverse.reshape(-1)
    return inverse, int(inverse.max()) + 1 if inverse.size else 0


def _weighted_mean_std(
    values: np.ndarray, weights: np.ndarray, seg: np.ndarray, num_seg: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per segment: n = sum w, mu = sum w x / n, sigma = sqrt(sum w (x - mu)^2 / (n - 1)).

    Weights are counts (tokens or members), so this is the unbiased std of the multiset in which
    x_j appears w_j times. sigma is defined as 0 when n <= 1 (torch would give nan).
    """
    n = np.bincount(seg, weights=weights, minlength=num_seg)
    s = np.bincount(seg, weights=weights * values, minlength=num_seg)
    mu = np.divide(s, n, out=np.zeros_like(s), where=n > 0)
    sq = np.bincount(seg, weights=weights * (values - mu[seg]) ** 2, minlength=num_seg)
    var = np.divide(sq, n - 1, out=np.zeros_like(sq), where=n > 1)
    return n, mu, np.sqrt(var)


def grpo_advantages(
    rewards: np.ndarray,
    group_ids: np.ndarray,
    weights: np.ndarray | None = None,
    eps: float = 1e-6,
) -> np.ndarray:
    """GRPO outcome advantage per trajectory.

    A_g = (R_g - mean_{h in G} R_h) / (std_{h in G} R_h + eps),  std unbiased (divisor |G| - 1),

    where G is the set of *valid* (w > 0) members sharing g's group id. Masked members get A = 0.
    A group with a single valid member has no baseline: its advantage is 0 (verl instead uses
    mean 0, std 1, i.e. A = R; we prefer no signal over an unbaselined one).

    Args:
      rewards: [N] shaped rewards.
      group_ids: [N] ints or strings, one per trajectory.
      weights: [N] in {0, 1}; None means all valid.
    Returns:
      [N] float64 advantages.
    """
    rewards = np.asarray(rewards, dtype=np.float64)
    valid = np.ones_like(rewards) if weights is None else (np.asarray(weights) > 0).astype(float)
    seg, num = _segment_ids(group_ids)
    n, mu, sigma = _weighted_mean_std(rewards, valid, seg, num)
    adv = (rewards - mu[seg]) / (sigma[seg] + eps)
    return np.where((valid > 0) & (n[seg] > 1), adv, 0.0)


def zero_variance_group_mask(
    rewards: np.ndarray, group_ids: np.ndarray, weights: np.ndarray | None = None
) -> np.ndarray:
    """Keep-mask [N]: 1 where the trajectory's group has at least two distinct valid rewards.

    keep_g = 1[max_{h in G} R_h > min_{h in G} R_h] * w_g

    Groups where every valid member scored the same (all solved, all failed, or only one valid
    member) have A = 0 everywhere and are dropped when `filter_zero_variance` is on.
    """
    rewards = np.asarray(rewards, dtype=np.float64)
    valid = np.ones(rewards.shape, bool) if weights is None else np.asarray(weights) > 0
    seg, num = _segment_ids(group_ids)
    hi = np.full(num, -np.inf)
    lo = np.full(num, np.inf)
    np.maximum.at(hi, seg[valid], rewards[valid])
    np.minimum.at(lo, seg[valid], rewards[valid])
    return ((hi[seg] > lo[seg]) & valid).astype(np.float64)


def task_normalize(
    advantages: np.ndarray,
    task_ids: np.ndarray,
    token_weights: np.ndarray,
    eps: float = 1e-6,
) -> np.ndarray:
    """AgentRL task advantage normalization (paper Eq. 1).

    Ã = (Â - mu_i) / (sigma_i + eps), with mu_i, sigma_i the mean and unbiased std of the
    advantages of all loss-masked tokens of task i in the batch.

    Works at two granularities with one formula:
      * per token: advantages [N, T], token_weights = loss mask [N, T];
      * per trajectory: advantages [N], token_weights = number of loss tokens [N] (every token
        of a trajectory carries the same Â, so a trajectory is its value repeated that many
        times: long trajectories weigh more, exactly as in AgentRL).
    Entries with weight 0 do not enter the statistics and are returned as 0. A task with at most
    one loss token has sigma := 0.

    Args:
      advantages: [N] or [N, T].
      task_ids: [N] task names or ints.
      token_weights: same shape as advantages; counts or a {0,1} mask.
    """
    adv = np.asarray(advantages, dtype=np.float64)
    w = np.broadcast_to(np.asarray(token_weights, dtype=np.float64), adv.shape)
    seg, num = _segment_ids(task_ids)
    seg_full = np.broadcast_to(seg.reshape((-1,) + (1,) * (adv.ndim - 1)), adv.shape)
    _, mu, sigma = _weighted_mean_std(adv.ravel(), w.ravel(), seg_full.ravel(), num)
    out = (adv - mu[seg_full]) / (sigma[seg_full] + eps)
    return np.where(w > 0, out, 0.0)


def compute_advantages(
    rewards: Sequence[float] | np.ndarray,
    completed: Sequence[bool] | np.ndarray,
    valid: Sequence[bool] | np.ndarray,
    group_ids: np.ndarray,
    task_ids: np.ndarray,
    num_loss_tokens: np.ndarray,
    config: ml_collections.ConfigDict | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """The whole pipeline above for one training batch of N trajectories.

    `completed` and `valid` are `shape_rewards`'s masks.

    Returns:
      (advantages [N], weights [N]); broadcast advantages over each trajectory's loss tokens and
      multiply its loss mask by its weight.
    """
    cfg = config or default_config()
    penalties = incomplete_penalties(rewards, completed, valid, group_ids, cfg)
    shaped, weights = shape_rewards(rewards, completed, valid, penalties)
    adv = grpo_advantages(shaped, group_ids, weights, cfg.eps)
    if cfg.filter_zero_variance:
        weights = weights * zero_variance_group_mask(shaped, group_ids, weights)
        adv = adv * weights
    if cfg.task_adv_norm:
        counts = np.asarray(num_loss_tokens, dtype=np.float64) * weights
        adv = task_normalize(adv, task_ids, counts, cfg.eps)
    return adv, weights
