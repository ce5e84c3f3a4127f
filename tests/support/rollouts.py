"""A hand-made `Rollout` for tests of what consumes rollouts."""

import numpy as np

from agentrl_jax.episode import SampleStatus
from agentrl_jax.rollout.record import Rollout


def rollout(group, member, reward=1.0, status=SampleStatus.COMPLETED, version=0, task="t",
            n=6, sampled=3):
    tokens = np.arange(n, dtype=np.int32) + 10 * member
    mask = np.zeros(n, np.int32)
    mask[n - sampled:] = 1
    versions = np.where(mask == 1, version, -1).astype(np.int32)
    return Rollout(task, 0, group, member, tokens, mask, np.where(mask, -0.5, 0).astype(
        np.float32), versions, np.where(mask, 0, -1).astype(np.int32), reward, status)
