"""From released groups of rollouts to the trainer's packed micro-batches.

    rewards, statuses → masks (`episode.training_treatment`) → shape (incomplete penalty)
    → GRPO per group → task normalisation
    → one advantage per rollout, broadcast over its sampled tokens → pack into micro-batches

Rollouts with nothing to train on (failed to start, no sampled token) are invalid members of
their group, whatever their status: they take part in no statistic and produce no row.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import ml_collections
import numpy as np

from agentrl_jax import episode
from agentrl_jax.rl import advantages as adv_lib
from agentrl_jax.rl.batch import TrainBatch, Trajectory, pack
from agentrl_jax.rollout.record import Rollout


@dataclasses.dataclass
class PreparedBatch:
    micro_batches: list[TrainBatch]
    num_loss_tokens: float
    metrics: dict[str, float]
    num_rollouts: int


def prepare_batch(
    groups: Sequence[Sequence[Rollout]],
    adv_config: ml_collections.ConfigDict,
    seq_buckets: Sequence[int],
    tokens_per_micro: int,
    row_multiple: int = 1,
) -> PreparedBatch | None:
    """Advantages and packing for one step; None when nothing in `groups` is trainable."""
    rollouts = [r for g in groups for r in g]
    if not rollouts:
        return None
    completed, valid = training_masks(rollouts)
    group_ids = np.asarray([r.group_id for r in rollouts])
    task_names = sorted({r.task for r in rollouts})
    task_ids = np.asarray([task_names.index(r.task) for r in rollouts])
    num_loss = np.asarray([r.num_loss_tokens for r in rollouts], np.float64)
    advantages, weights = adv_lib.compute_advantages(
        [r.reward for r in rollouts], completed, valid, group_ids, task_ids, num_loss, adv_config)

    trajectories = [_trajectory(r, float(a), float(w))
                    for r, a, w in zip(rollouts, advantages, weights, strict=True) if w > 0]
    metrics = rollout_metrics(rollouts)
    if not trajectories:
        return None
    micro, num_tokens = pack(trajectories, seq_buckets, tokens_per_micro, row_multiple)
    metrics["num_loss_tokens"] = num_tokens
    metrics["num_micro_batches"] = len(micro)
    # What the step computes on: every input position of the trained episodes (their whole
    # context, not only the sampled tokens), and the packed rows with their padding.
    metrics["num_input_tokens"] = sum(len(t) - 1 for t in trajectories)
    metrics["num_row_tokens"] = sum(m.tokens.size for m in micro)
    return PreparedBatch(micro, num_tokens, metrics, len(trajectories))


def training_masks(rollouts: Sequence[Rollout]) -> tuple[list[bool], list[bool]]:
    """(completed, valid) per rollout, as `rl.advantages.shape_rewards` takes them.

    completed_g = [treatment(status_g) is SCORED]
    valid_g     = [treatment(status_g) is not MASKED and rollout g is trainable]
    """
    treatments = [episode.training_treatment(r.status) for r in rollouts]
    completed = [t is episode.Treatment.SCORED for t in treatments]
    valid = [r.trainable and t is not episode.Treatment.MASKED
             for r, t in zip(rollouts, treatments, strict=True)]
    return completed, valid


def has_reward_variance(group: Sequence[Rollout], adv_config: ml_collections.ConfigDict
                        ) -> bool:
    """Whether the group's valid members have at least two distinct shaped rewards (the
    incomplete-episode penalty applied, as `rl.advantages.compute_advantages` applies it):
    only then is its GRPO advantage nonzero."""
    rewards = [r.reward for r in group]
    completed, valid = training_masks(group)
    one_group = np.zeros(len(group), np.int64)
    penalties = adv_lib.incomplete_penalties(rewards, completed, valid, one_group, adv_config)
    shaped, weights = adv_lib.shape_rewards(rewards, completed, valid, penalties)
    keep = adv_lib.zero_variance_group_mask(shaped, one_group, weights)
    return bool(keep.any())


def _trajectory(rollout: Rollout, advantage: float, weight: float) -> Trajectory:
    """The rollout up to its last sampled token.

    What follows it (the environment's last reply, e.g. the one that overflowed the context
    limit) has no loss and nothing after it to condition, so it would only cost row length:
    a reply that took a 4000-token episode past the largest training bucket crashed the step.
    """
    end = int(np.flatnonzero(rollout.loss_mask)[-1]) + 1
    return Trajectory(tokens=rollout.tokens[:end], loss_mask=rollout.loss_mask[:end],
                      behaviour_logprobs=rollout.logprobs[:end], advantage=advantage,
                      weight=weight)


def rollout_metrics(rollouts: Sequence[Rollout]) -> dict[str, float]:
    """Success, reward and how episodes ended, overall and per task."""
    out: dict[str, float] = {"num_rollouts": len(rollouts)}
    for name in [None, *sorted({r.task for r in rollouts})]:
        subset = [r for r in rollouts if name is None or r.task == name]
        prefix = "" if name is None else f"{name}/"
        out[prefix + "reward_mean"] = float(np.mean([r.reward for r in subset]))
        out[prefix + "success"] = float(
            np.mean([episode.is_success(r.status, r.reward) for r in subset]))
        out[prefix + "turns_mean"] = float(np.mean([r.num_turns for r in subset]))
        for status in sorted({str(r.status) for r in subset}):
            out[prefix + "status/" + status.replace(" ", "_")] = float(
                np.mean([str(r.status) == status for r in subset]))
    return out
