"""How an episode ended, and what that end means for training and evaluation.

This is the one definition of an episode's status (the wire values of AgentRL's protocol), of
success, and of how training treats each status. It has no dependency beyond the standard
library, so that tasks, rollouts, the trainer and the controller can all import it.

Training treats every final status in one of three ways (`training_treatment`):

    status                    treatment   why
    completed                 SCORED      the environment graded the episode: keep its reward
    agent context limit       PENALISED   the agent ran out of context: its fault
    agent validation failed   PENALISED   the agent sent input the worker cannot act on
                                          (malformed tool call, bad JSON, over-deep nesting;
                                          `environments/worker/agent_input.py`): its fault
    agent invalid action      PENALISED   the agent's action was refused: its fault
    task limit reached        PENALISED   the agent used every turn without finishing
    running                   PENALISED   stopped before the environment ended it (truncated)
    task error                MASKED      the environment or the sampler failed
    cancelled                 MASKED      the episode was ended from outside (shutdown, idle)
    unknown                   MASKED      no recognised status came back (see below)

PENALISED replaces the reward with the incomplete-episode penalty (AgentRL's -0.2); MASKED gives
the episode weight 0, so that it enters no statistic: an episode that says nothing about the
policy must neither cost nor reward the agent.

`unknown` is what a peer's unrecognised status parses to (`SampleStatus.parse`), what the
controller records when an episode ends without a final status, and a `Rollout`'s default. None
of these is chosen by the agent: the status is the worker's report, never model text. So it is
the environment's failure: masked in training and counted as a task error in evaluation, one
decision for both (penalising it would let a broken worker push the policy).

Success (`is_success`) is the AgentBench definition used everywhere, in evaluation, in the
training metrics, by the curriculum and by the oracles: the episode completed with full reward.
WebShop's reward is fractional (the attribute match), so a partial match scores but is no success.
"""

from __future__ import annotations

import enum
from typing import Any

SampleIndex = int | str


class SampleStatus(enum.StrEnum):
    """How an episode stands; every value other than `running` ends it."""

    RUNNING = "running"
    COMPLETED = "completed"
    AGENT_CONTEXT_LIMIT = "agent context limit"
    AGENT_VALIDATION_FAILED = "agent validation failed"
    AGENT_INVALID_ACTION = "agent invalid action"
    TASK_LIMIT_REACHED = "task limit reached"
    TASK_ERROR = "task error"
    CANCELLED = "cancelled"
    UNKNOWN = "unknown"

    @classmethod
    def parse(cls, value: Any) -> SampleStatus:
        """Reads a status from a peer; anything unrecognised is `unknown`, never an error."""
        try:
            return cls(value)
        except ValueError:
            return cls.UNKNOWN


class Treatment(enum.Enum):
    """What the trainer does with an episode's reward (the table in the module docstring)."""

    SCORED = "scored"
    PENALISED = "penalised"
    MASKED = "masked"


# Ends that say nothing about the policy (not the agent's fault): weight 0 in training, the
# "task error" column in evaluation.
MASKED_STATUSES = frozenset(
    {SampleStatus.TASK_ERROR, SampleStatus.CANCELLED, SampleStatus.UNKNOWN})


def training_treatment(status: SampleStatus | str) -> Treatment:
    """SCORED for `completed`, MASKED for `MASKED_STATUSES`, PENALISED for every other status.

    A string is read as a peer's status (`SampleStatus.parse`), so an unrecognised one is masked.
    """
    status = SampleStatus.parse(status)
    if status is SampleStatus.COMPLETED:
        return Treatment.SCORED
    if status in MASKED_STATUSES:
        return Treatment.MASKED
    return Treatment.PENALISED


def is_success(status: SampleStatus | str, reward: float) -> bool:
    """success = [status == completed and reward >= 1]."""
    return SampleStatus.parse(status) is SampleStatus.COMPLETED and reward >= 1.0
