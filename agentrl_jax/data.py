"""The stream of (task, index) draws the rollout workers consume, as a grain dataset.

Every task contributes at the same frequency (AgentRL trains its five tasks interleaved); within
a task, indices come in a fresh shuffled order each epoch. The iterator is checkpointable: its
state goes into the training checkpoint so that a resumed run continues the same sequence
instead of replaying draws it already trained on.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import grain

from agentrl_jax.episode import SampleIndex


class TaskStream:
    """An endless, seeded, checkpointable iterator of `(task, index)` pairs.

    Args:
      task_indices: for each task name, the indices to draw from (e.g. the controller's
        `get_indices`).
      seed: the shuffle seed; each task gets its own stream derived from it.
      weights: relative task frequencies; default equal.
    """

    def __init__(
        self,
        task_indices: Mapping[str, Sequence[SampleIndex]],
        seed: int = 0,
        weights: Mapping[str, float] | None = None,
    ):
        if not task_indices:
            raise ValueError("no tasks to draw from")
        empty = [name for name, indices in task_indices.items() if not indices]
        if empty:
            raise ValueError(f"tasks without indices: {empty}")
        self.tasks = sorted(task_indices)
        per_task = []
        for k, name in enumerate(self.tasks):
            source = grain.MapDataset.source(list(task_indices[name]))
            per_task.append(
                source.shuffle(seed=seed * 1000 + k).repeat().map(_tag(name))
            )
        weights = weights or {}
        mixed = grain.MapDataset.mix(per_task, weights=[weights.get(t, 1.0) for t in self.tasks])
        self._iterator = iter(mixed.to_iter_dataset())

    def __iter__(self) -> TaskStream:
        return self

    def __next__(self) -> tuple[str, SampleIndex]:
        return next(self._iterator)

    def observe(self, task: str, index: SampleIndex, passes: Sequence[bool]) -> None:
        """A group's outcomes; the plain stream ignores them (`pipeline.curriculum` does not)."""

    def get_state(self) -> dict[str, Any]:
        return self._iterator.get_state()

    def set_state(self, state: dict[str, Any]) -> None:
        self._iterator.set_state(state)


def _tag(name: str):
    # A named function (not a lambda in a loop) so each task keeps its own name.
    def tag(index: SampleIndex) -> tuple[str, SampleIndex]:
        return name, index

    return tag
