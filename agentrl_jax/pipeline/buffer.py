"""The trajectory buffer between rollout workers and the trainer.

Rollouts arrive one by one; a group (the G rollouts of one (task, index) draw) is released to
the trainer only when all G members have ended, because GRPO normalises within the group. A
member that failed (task error, cancelled) still counts as ended: it is masked out later, so a
group never waits forever for a member that died. Groups are released in completion order and
the trainer takes every complete group available (AgentRL drains the buffer each step).

Staleness: a rollout's lag is the trainer's version minus the oldest weight version among the
tokens its trained policy sampled (`TRAINED_POLICY` of `rollout.cross_policy`, found by name in
the policy mix the rollouts were played with). Turns of
the stale snapshot are old on purpose (cross-policy sampling; the importance ratio against
their behaviour log-probs corrects for them) and do not count: counted, they would make every
multi-turn group that drew a snapshot turn stale as soon as the snapshot is max_staleness
versions old. With `max_staleness` set,
groups whose lag exceeds it are dropped (counted, not trained); the lag of everything taken is
recorded as a distribution, reported and reset by `report_metrics`.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
from typing import NamedTuple

import numpy as np

from agentrl_jax.rollout.cross_policy import TRAINED_POLICY, PolicyMix
from agentrl_jax.rollout.record import Rollout


class Taken(NamedTuple):
    """What one `take` removed: the groups for the trainer, and how many it discarded."""

    groups: list[list[Rollout]]
    discarded: int  # stale or without a trainable member: never trained, admission to return


@dataclasses.dataclass
class _PendingGroup:
    task: str
    size: int
    members: dict[int, Rollout] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class BufferStats:
    groups_released: int = 0
    groups_dropped_stale: int = 0
    groups_untrainable: int = 0  # every member failed: nothing to learn from
    rollouts_taken: int = 0
    lags: list[int] = dataclasses.field(default_factory=list)  # of rollouts taken, this period

    def lag_summary(self) -> dict[str, float]:
        if not self.lags:
            return {}
        lags = np.asarray(self.lags)
        out = {"lag_mean": float(lags.mean()), "lag_max": float(lags.max())}
        for k in range(int(lags.max()) + 1):
            out[f"lag_frac_{k}"] = float(np.mean(lags == k))
        return out


class TrajectoryBuffer:
    """Holds rollouts until their group is complete; hands complete groups to the trainer."""

    def __init__(self, group_size: int, max_staleness: int | None = None,
                 policy_mix: PolicyMix | None = None):
        """`policy_mix`: the mix the rollouts are played with (default the trained policy
        alone); the policy id whose tokens measure staleness is `TRAINED_POLICY`'s in it."""
        if group_size < 1:
            raise ValueError("group_size must be >= 1")
        self.group_size = group_size
        self.max_staleness = max_staleness
        self._trained_id = (policy_mix or PolicyMix.single()).policy_id(TRAINED_POLICY)
        self._pending: dict[int, _PendingGroup] = {}
        self._ready: collections.deque[list[Rollout]] = collections.deque()
        self._changed = asyncio.Event()
        self.stats = BufferStats()

    # ---- producer side -------------------------------------------------------------------

    def open_group(self, group_id: int, task: str, size: int | None = None) -> None:
        if group_id in self._pending:
            raise ValueError(f"group {group_id} is already open")
        self._pending[group_id] = _PendingGroup(task, size or self.group_size)

    def add(self, rollout: Rollout) -> None:
        """Adds one ended rollout (of any status); releases its group when it is complete."""
        group = self._pending.get(rollout.group_id)
        if group is None:
            raise KeyError(f"rollout for unknown group {rollout.group_id}")
        if rollout.member in group.members:
            raise ValueError(f"group {rollout.group_id} already has member {rollout.member}")
        group.members[rollout.member] = rollout
        if len(group.members) == group.size:
            del self._pending[rollout.group_id]
            self._ready.append([group.members[m] for m in sorted(group.members)])
            self.stats.groups_released += 1
            self._changed.set()

    # ---- consumer side -------------------------------------------------------------------

    @property
    def num_ready(self) -> int:
        return len(self._ready)

    @property
    def num_pending(self) -> int:
        return len(self._pending)

    def take(self, current_version: int, max_groups: int | None = None) -> Taken:
        """Removes complete groups (all, or the oldest `max_groups` kept ones) and returns them
        with the number discarded on the way.

        Groups whose lag exceeds `max_staleness`, and groups without a single trainable member,
        are discarded here (also counted in `stats`) and not returned.
        """
        taken: list[list[Rollout]] = []
        discarded = 0
        while self._ready and (max_groups is None or len(taken) < max_groups):
            group = self._ready.popleft()
            lag = self._group_lag(group, current_version)
            if self.max_staleness is not None and lag > self.max_staleness:
                self.stats.groups_dropped_stale += 1
                discarded += 1
                continue
            if not any(r.trainable for r in group):
                self.stats.groups_untrainable += 1
                discarded += 1
                continue
            for r in group:
                version = r.oldest_version(self._trained_id)
                if version is not None:
                    self.stats.lags.append(current_version - version)
            self.stats.rollouts_taken += len(group)
            taken.append(group)
        if not self._ready:
            self._changed.clear()
        return Taken(taken, discarded)

    def report_metrics(self) -> dict[str, float]:
        """The lag distribution of the rollouts taken since the previous report (`lag_*`),
        which it then forgets, and the run's discard counts so far."""
        metrics = {**self.stats.lag_summary(),
                   "groups_dropped_stale": float(self.stats.groups_dropped_stale),
                   "groups_untrainable": float(self.stats.groups_untrainable)}
        self.stats.lags.clear()
        return metrics

    async def wait_for(self, num_groups: int) -> None:
        """Returns once at least `num_groups` complete groups are ready."""
        while len(self._ready) < num_groups:
            self._changed.clear()
            await self._changed.wait()

    def _group_lag(self, group: list[Rollout], current_version: int) -> int:
        versions = [v for r in group if (v := r.oldest_version(self._trained_id)) is not None]
        return current_version - min(versions) if versions else 0
