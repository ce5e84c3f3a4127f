"""Which RL checkpoint a run keeps: the one with the best success on the validation slice.

An RL step moves a small policy a long way: on the tic-tac-toe job the training episodes'
success swings by 15-20 points from one step to the next, so the last step's policy is one draw
from a noisy path. With `eval.select_every = N` the job plays the validation slice (held-out
train indices RL never draws; `evaluation/protocol.py`) with the RL checkpoints at steps N, 2N,
... and the last step, and the run's final policy is the checkpoint with the highest mean
success over the evaluated tasks (a tie goes to the later step). The test subset is played
once, with that policy, after the choice: the choice sees validation only, so the paired test
difference stays an honest estimate.

The candidate checkpoints survive `rl.checkpoint.keep` through `rl.checkpoint.keep_period`,
which the resolved config sets to N (`experiment/run_config.py`).
"""

from __future__ import annotations

from collections.abc import Mapping


def candidate_steps(steps: int, every: int) -> list[int]:
    """The RL steps whose checkpoints are compared: every `every`-th step and the last,
    `{k * every : 0 < k * every <= steps} | {steps}`, ascending."""
    if every <= 0 or steps <= 0:
        raise ValueError(f"selection needs positive steps and interval, not {steps}, {every}")
    return sorted({*range(every, steps + 1, every), steps})


def best_step(success: Mapping[int, float]) -> int:
    """argmax over steps of `success[step]`, the latest step among equals."""
    if not success:
        raise ValueError("no checkpoint was evaluated")
    return max(success, key=lambda step: (success[step], step))


def check_selection(select_every: int, checkpoint_every: int, keep_period: int) -> None:
    """Raises ValueError unless every candidate step is checkpointed and kept: `select_every`
    a multiple of `checkpoint_every`, and `keep_period` (when set) dividing it."""
    if select_every % checkpoint_every:
        raise ValueError(f"eval.select_every={select_every} must be a multiple of "
                         f"rl.checkpoint.every={checkpoint_every}: the candidates are "
                         "checkpoints")
    if keep_period and select_every % keep_period:
        raise ValueError(f"rl.checkpoint.keep_period={keep_period} must divide "
                         f"eval.select_every={select_every}, or the candidates are deleted")
