"""Served trajectories into the pipeline's GRPO groups.

GRPO normalises a reward against the other members of its group (several attempts at one
task), and only the caller knows which of its trajectories are attempts at the same task (the
agent, or `serving.task_gateway` for the jobs the trainer gives). So the reward call declares
it (`POST /v1/trajectories/{id}/reward`): `task`, `group_id` (the
caller's name for the group, unique among its groups open at once), `member` (0..size-1) and
`group_size` (default: the collector's, normally the pipeline's `group_size`). A group is
complete, and filed with the pipeline (`RLPipeline.add_group`, which gives it a
pipeline group id of its own), once each of its `group_size` members has been rewarded. From
then on it is trained exactly as the pipeline's own groups: the staleness drop, cross-policy
versions and policy ids per token, GRPO and task advantage normalisation. The policy ids are
the server's numbering (`serving.service.Service`: the trained policy first, then the other
served policies); staleness is measured on the trained policy's tokens, id 0 in both the server
and the pipeline's mixes (`PolicyMix.single`, `current_and_stale`).

A trajectory with several segments (the agent edited its history, `serving.trajectories`)
trains its last segment only, as that group member. Its reward is one outcome of the whole
trajectory, and GRPO's statistics are over members: a segment per member slot would count an
agent that edits its history once per segment in the group's mean and std, pulling the baseline
toward its reward, and the batching has no way to share one advantage among several rows. The
last segment is the stream that ends in the outcome rewarded, and its tokens are all sampled
under its own prompt, so it is an exact on-policy sample; the earlier segments' tokens are not
trained (counted in `segments_dropped`).

A client's mistakes cost its group, never the run: a member number outside its group, a size
differing from the one its group was opened with, or a member rewarded twice is rejected
(counted in `rejected`, logged), and open groups are bounded (`max_open`, the oldest
incomplete one is dropped).
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import logging
from collections.abc import Callable, Sequence
from typing import Any

from agentrl_jax.pipeline.rollout_source import GroupFeed
from agentrl_jax.rollout.record import Rollout

log = logging.getLogger(__name__)


@dataclasses.dataclass
class _OpenGroup:
    size: int
    members: dict[int, Rollout] = dataclasses.field(default_factory=dict)


class ServedGroups:
    """Collects the rollouts of finished trajectories into complete groups for `submit`; as a
    rollout source (`pipeline.rollout_source`), for the feed it is attached to."""

    def __init__(self, submit: Callable[[list[Rollout]], Any] | None = None, *,
                 default_size: int, max_open: int = 1024):
        """`submit(members)`: receives each complete group, its members by member number
        (`RLPipeline.add_group`); None until a feed is attached, and the groups completed
        meanwhile wait for it (at most `max_open`, the oldest dropped beyond)."""
        if default_size < 1:
            raise ValueError("default_size must be >= 1")
        self.submit, self.default_size, self.max_open = submit, default_size, max_open
        self._open: collections.OrderedDict[tuple[str, int], _OpenGroup] = (
            collections.OrderedDict())
        self.submitted = 0  # complete groups handed on
        self.segments_dropped = 0  # earlier segments of multi-segment trajectories
        self.groups_dropped = 0  # evicted beyond `max_open`, open or waiting for a feed
        self._waiting: collections.deque[list[Rollout]] = collections.deque()
        self.rejected: collections.Counter[str] = collections.Counter()

    async def attach(self, feed: GroupFeed) -> None:
        """Files the groups completed so far with `feed`, then each as it completes."""
        self.submit = feed.add_group
        while self._waiting:
            self._submit(self._waiting.popleft())

    async def detach(self) -> None:
        self.submit = None

    @property
    def num_open(self) -> int:
        return len(self._open)

    def add(self, rollouts: Sequence[Rollout]) -> int:
        """Files rollouts as `TrajectoryStore.pop_finished` returns them (one per segment);
        returns how many groups this completed and submitted."""
        last: dict[Any, Rollout] = {}
        for rollout in rollouts:
            trajectory = rollout.metrics.get("trajectory_id", rollout.index)
            if trajectory in last:
                self.segments_dropped += 1
            last[trajectory] = rollout  # segments come in order: the last one wins
        return sum(self._file(r) for r in last.values())

    def _file(self, rollout: Rollout) -> bool:
        key = (rollout.task, rollout.group_id)
        size = int(rollout.metrics.get("group_size") or self.default_size)
        group = self._open.get(key)
        if group is not None and group.size != size:
            return self._reject(rollout, "size", f"declares size {size}, its group {group.size}")
        if not 0 <= rollout.member < size:
            return self._reject(rollout, "member", f"member {rollout.member} of {size}")
        if group is None:
            while len(self._open) >= self.max_open:
                self._open.popitem(last=False)
                self.groups_dropped += 1
            group = self._open[key] = _OpenGroup(size)
        if rollout.member in group.members:
            return self._reject(rollout, "duplicate", f"member {rollout.member} again")
        # The draw's index (what the curriculum keys its history by) when the finisher knows
        # it (`serving.task_gateway`), else the caller's group id names the draw.
        group.members[rollout.member] = dataclasses.replace(
            rollout, index=rollout.metrics.get("index", rollout.group_id))
        if len(group.members) < size:
            return False
        del self._open[key]
        members = [group.members[m] for m in range(size)]
        if self.submit is None:   # no pipeline runs: it waits for one
            if len(self._waiting) >= self.max_open:
                self._waiting.popleft()
                self.groups_dropped += 1
            self._waiting.append(members)
            return False
        self._submit(members)
        return True

    def _submit(self, members: list[Rollout]) -> None:
        assert self.submit is not None
        self.submit(members)
        self.submitted += 1

    def _reject(self, rollout: Rollout, why: str, detail: str) -> bool:
        self.rejected[why] += 1
        log.warning("served trajectory %s of group (%s, %s) rejected: %s",
                    rollout.metrics.get("trajectory_id"), rollout.task, rollout.group_id, detail)
        return False

    async def feed_from(self, pop_finished: Callable[[], list[Rollout]],
                        interval_s: float = 0.05) -> None:
        """Runs until cancelled, in the pipeline's event loop: every `interval_s`, files what
        `pop_finished` (`TrajectoryStore.pop_finished`) returns."""
        while True:
            self.add(pop_finished())
            await asyncio.sleep(interval_s)
