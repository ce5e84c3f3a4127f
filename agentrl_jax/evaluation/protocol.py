"""Which indices are evaluated, and which train indices are held out: the evaluation protocol.

    test        `evenly_spaced(test split, per_task)`: a fixed subset spread over each task's
                test split, the same before and after RL; for reporting only.
    demos       `evenly_spaced(train split, reserved)`: the train indices the warm start's
                oracle demonstrations play (`demos.per_task` of them).
    validation  `evenly_spaced(train split less the demos, per_task)`: held-out train indices
                for decisions (model size, learning rates, curriculum, ...); they share no
                index with the demonstrations, and RL never draws them (`rl_indices`).

Spreading evenly (not the first indices) matters: splits are often ordered by source, type or
difficulty. ALFWorld's train split is ordered by task type: its first 120 games are all
"examine/look at X under the desklamp" in bedrooms, so demonstrations taken from the front
taught one of its six task types. `docs/evaluation.md` lists the resulting indices of the
default. `selection` gives either subset as the function the evaluation driver
(`agentbench.evaluate`) applies to each task's indices.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from agentrl_jax.episode import SampleIndex

TEST_PER_TASK = 40
VALIDATION_PER_TASK = 20
TEMPERATURE = 0.8  # AgentRL's evaluation temperature
SUBSETS = ("test", "validation")


def evenly_spaced(indices: Sequence[SampleIndex], count: int) -> list[SampleIndex]:
    """`count` of `indices` spread evenly over the sequence (all of them if it is shorter).

    Position i of n is ⌊(2i + 1)·n / 2·count⌋, i = 0..count−1: the middle of each of `count`
    equal slices, so neither end of a split dominates and the first index is not special.
    """
    n = len(indices)
    if count >= n:
        return list(indices)
    return [indices[(2 * i + 1) * n // (2 * count)] for i in range(count)]


def test_indices(test_split: Sequence[SampleIndex], per_task: int = TEST_PER_TASK
                 ) -> list[SampleIndex]:
    """The evaluated subset of a task's test split."""
    return evenly_spaced(test_split, per_task)


def demo_indices(train_split: Sequence[SampleIndex], count: int) -> list[SampleIndex]:
    """The train indices whose oracle episodes are the warm start's demonstrations."""
    return evenly_spaced(train_split, count) if count > 0 else []


def validation_indices(train_split: Sequence[SampleIndex], reserved: int,
                       per_task: int = VALIDATION_PER_TASK) -> list[SampleIndex]:
    """The held-out validation slice of a task's train split: none of the `reserved`
    demonstration indices (`demo_indices`)."""
    demos = set(map(_key, demo_indices(train_split, reserved)))
    return evenly_spaced([i for i in train_split if _key(i) not in demos], per_task)


def rl_indices(train_split: Sequence[SampleIndex], reserved: int,
               per_task: int = VALIDATION_PER_TASK) -> list[SampleIndex]:
    """The train indices RL may draw: all but the validation slice."""
    held_out = set(map(_key, validation_indices(train_split, reserved, per_task)))
    return [i for i in train_split if _key(i) not in held_out]


def selection(subset: str = "test", per_task: int | None = None, reserved: int = 0
              ) -> Callable[[Sequence[SampleIndex]], list[SampleIndex]]:
    """The indices of one split that `subset` evaluates, as a function of the split.

      test        `test_indices(split, per_task)`; every index when `per_task` is None
      validation  `validation_indices(split, reserved, per_task)` of the train split
                  (`reserved`: the number of demonstrations);
                  `VALIDATION_PER_TASK` when `per_task` is None
    """
    if subset == "test":
        if per_task is None:
            return list
        return lambda split: test_indices(split, per_task)
    if subset == "validation":
        count = VALIDATION_PER_TASK if per_task is None else per_task
        return lambda split: validation_indices(split, reserved, count)
    raise ValueError(f"unknown evaluation subset {subset!r}; known: {', '.join(SUBSETS)}")


def _key(index: SampleIndex) -> str:
    return repr(index)
