"""What one episode leaves behind for the trainer: a `Rollout`.

Token-in, token-out: `tokens` is the conversation's append-only stream exactly as sampled and
rendered; per token, `loss_mask` (1 = sampled by a policy), the behaviour log-prob, and which
policy (`policy_ids`, an index into the policy pool) at which weight version (`versions`)
produced it. Environment tokens carry mask 0, log-prob 0 and policy/version -1.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from agentrl_jax.episode import SampleIndex, SampleStatus


@dataclasses.dataclass
class Rollout:
    task: str
    index: SampleIndex
    group_id: int  # the G rollouts of one (task, index) draw share it
    member: int  # position within the group, 0..G-1
    tokens: np.ndarray  # int32 [n]
    loss_mask: np.ndarray  # int32 [n]
    logprobs: np.ndarray  # float32 [n]
    versions: np.ndarray  # int32 [n], -1 on environment tokens
    policy_ids: np.ndarray  # int32 [n], -1 on environment tokens
    reward: float = 0.0
    status: SampleStatus = SampleStatus.UNKNOWN
    num_turns: int = 0
    metrics: dict[str, Any] = dataclasses.field(default_factory=dict)
    messages: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    error: str | None = None  # why a `task error` happened, for logs

    @classmethod
    def failed(
        cls, task: str, index: SampleIndex, group_id: int, member: int, error: str
    ) -> Rollout:
        """An episode that produced nothing trainable (it will be masked out of its group)."""
        empty_i, empty_f = np.zeros(0, np.int32), np.zeros(0, np.float32)
        return cls(task, index, group_id, member, empty_i, empty_i, empty_f, empty_i, empty_i,
                   status=SampleStatus.TASK_ERROR, error=error)

    @property
    def num_loss_tokens(self) -> int:
        return int(self.loss_mask.sum())

    @property
    def trainable(self) -> bool:
        """Has at least one sampled token after the first (there is a prediction to train)."""
        return len(self.tokens) >= 2 and bool(self.loss_mask[1:].any())

    def oldest_version(self, policy_id: int | None = None) -> int | None:
        """The oldest weight version among sampled tokens (of policy `policy_id` only, if given);
        None when there are none."""
        sampled = self.loss_mask > 0
        if policy_id is not None:
            sampled &= self.policy_ids == policy_id
        versions = self.versions[sampled]
        return int(versions.min()) if versions.size else None
