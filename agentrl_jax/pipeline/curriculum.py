"""A learnability curriculum: prefer train indices the policy solves sometimes, not always.

A GRPO group whose members all pass or all fail has zero advantage everywhere; the indices
worth drawing are those whose running pass rate is strictly between 0 and 1. The curriculum
wraps the task stream (`data.TaskStream`) and changes only which index of a task is drawn:

  * the task of every draw is the stream's, so tasks keep their configured share exactly;
  * with probability `prefer`, and when the task has learnable indices, the stream's index is
    replaced by one of them, chosen uniformly; otherwise the stream's (fresh) index is kept,
    so unseen indices keep being explored;
  * an index's running pass rate is over its last `window` observed groups:
    rate = Σ passes / Σ episodes (a pass is `episode.is_success`).

Randomness comes from `numpy.random.default_rng([seed, draw number])`, so the state is the
wrapped stream's state, the draw count and the observations; `get_state` returns it as JSON
(it goes into the checkpoint's bookkeeping) and a resumed run continues the same sequence.
"""

from __future__ import annotations

import collections
import json
from collections.abc import Sequence
from typing import Any

import ml_collections
import numpy as np

from agentrl_jax.data import TaskStream
from agentrl_jax.episode import SampleIndex


def default_config() -> ml_collections.ConfigDict:
    return ml_collections.ConfigDict(dict(
        enabled=False,  # off: the plain task stream (the paper's runs)
        prefer=0.5,  # probability that a draw goes to a learnable index of its task
        window=4,  # groups per index in its running pass rate
    ))


class LearnabilityCurriculum:
    """A `TaskStream` whose draws prefer learnable indices; same iterator and state methods."""

    def __init__(self, stream: TaskStream, *, prefer: float = 0.5, window: int = 4,
                 seed: int = 0):
        if not 0.0 <= prefer <= 1.0 or window < 1:
            raise ValueError("need 0 <= prefer <= 1 and window >= 1")
        self.stream = stream
        self.prefer, self.window, self.seed = float(prefer), int(window), int(seed)
        self._draws = 0
        # task -> index (JSON text) -> the last `window` (passes, episodes) of its groups.
        self._history: dict[str, dict[str, collections.deque]] = {}

    def __iter__(self) -> LearnabilityCurriculum:
        return self

    def __next__(self) -> tuple[str, SampleIndex]:
        task, index = next(self.stream)
        rng = np.random.default_rng([self.seed, self._draws])
        self._draws += 1
        learnable = self.learnable(task)
        if learnable and rng.random() < self.prefer:
            index = learnable[int(rng.integers(len(learnable)))]
        return task, index

    def observe(self, task: str, index: SampleIndex, passes: Sequence[bool]) -> None:
        """Records one group's outcomes (one bool per member that counts)."""
        if not passes:
            return
        per_task = self._history.setdefault(task, {})
        key = json.dumps(index)
        if key not in per_task:
            per_task[key] = collections.deque(maxlen=self.window)
        per_task[key].append((int(sum(map(bool, passes))), len(passes)))

    def pass_rate(self, task: str, index: SampleIndex) -> float | None:
        """Σ passes / Σ episodes over the index's last `window` groups; None if never seen."""
        groups = self._history.get(task, {}).get(json.dumps(index))
        if not groups:
            return None
        return sum(p for p, _ in groups) / sum(n for _, n in groups)

    def learnable(self, task: str) -> list[SampleIndex]:
        """The task's indices with 0 < pass rate < 1, in order of first observation."""
        out = []
        for key, groups in self._history.get(task, {}).items():
            passes, episodes = sum(p for p, _ in groups), sum(n for _, n in groups)
            if 0 < passes < episodes:
                out.append(json.loads(key))
        return out

    def get_state(self) -> dict[str, Any]:
        return {
            "stream": self.stream.get_state(), "draws": self._draws,
            "history": [[task, key, [list(g) for g in groups]]
                        for task, per_task in self._history.items()
                        for key, groups in per_task.items()],
        }

    def set_state(self, state: dict[str, Any]) -> None:
        self.stream.set_state(state["stream"])
        self._draws = int(state["draws"])
        self._history = {}
        for task, key, groups in state["history"]:
            self._history.setdefault(task, {})[key] = collections.deque(
                (tuple(g) for g in groups), maxlen=self.window)


def task_stream(task_indices, config: ml_collections.ConfigDict, seed: int
                ) -> TaskStream | LearnabilityCurriculum:
    """The pipeline's stream of draws: plain, or with the curriculum when `config.enabled`."""
    stream = TaskStream(task_indices, seed=seed)
    if not config.enabled:
        return stream
    return LearnabilityCurriculum(stream, prefer=config.prefer, window=config.window, seed=seed)
