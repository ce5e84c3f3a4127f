"""What became of an interact whose reply was lost: judged from the worker's `sample_status`.

An interact is not idempotent (an action applied twice is a different episode), so when the
connection fails after the request may have left, the controller does not send it again
blindly: it asks the worker how the session stands and acts on the verdict:

- NOT_APPLIED: the worker never acted on it (the session is still at the previous turn): it is
  sent again, once, on a fresh connection.
- APPLIED: the worker acted on it. AgentRL's worker reports the session's whole history and
  where the last reply began (`env_output.history`, `history_ptr`), so the lost reply is rebuilt
  from it; ours reports only a turn count, so the reply is lost and the session ends.
- IN_PROGRESS: the worker is still acting on it: ask again later.
- GONE: the worker no longer holds the session (it ended there, or the worker restarted).
- UNKNOWN: the status cannot tell; the session ends rather than risk applying a turn twice.

Evidence must be positive both ways: a status that is merely consistent with "not applied" is
UNKNOWN, never NOT_APPLIED.
"""

from __future__ import annotations

import dataclasses
import enum
import json
from typing import Any

from agentrl_jax.controller.wire import Message, SampleStatus, WorkerEnvOutput


class Outcome(enum.Enum):
    NOT_APPLIED = "not applied"
    APPLIED = "applied"
    IN_PROGRESS = "in progress"
    GONE = "gone"
    UNKNOWN = "unknown"


@dataclasses.dataclass(frozen=True)
class Verdict:
    outcome: Outcome
    output: WorkerEnvOutput | None = None   # the rebuilt reply of an APPLIED interact, if any


def judge_lost_interact(status: dict[str, Any] | None, sent: list[Message],
                        previous: list[Message] | None, turns_before: int) -> Verdict:
    """The verdict on an interact of `sent` from the worker's `sample_status` answer.

    `status`: the answer's JSON, None when the worker said it has no such session. `previous`:
    the messages of the session's last interact the worker applied (None before the first);
    `turns_before`: how many interacts it had applied.
    """
    if status is None:
        return Verdict(Outcome.GONE)
    state = status.get("status") if isinstance(status, dict) else None
    if not isinstance(state, dict):
        return Verdict(Outcome.UNKNOWN)
    if state.get("waiting_for_env") is True:
        return Verdict(Outcome.IN_PROGRESS)
    if isinstance(state.get("turns"), int):   # ours: the worker counts the turns it took
        if state["turns"] == turns_before:
            return Verdict(Outcome.NOT_APPLIED)
        if state["turns"] == turns_before + 1:
            return Verdict(Outcome.APPLIED)
        return Verdict(Outcome.UNKNOWN)
    output = state.get("env_output")
    if isinstance(output, dict):              # AgentRL's: the whole history
        return _judge_from_history(output, sent, previous, turns_before)
    return Verdict(Outcome.UNKNOWN)


def _judge_from_history(output: dict[str, Any], sent: list[Message],
                        previous: list[Message] | None, turns_before: int) -> Verdict:
    """AgentRL's `history[:history_ptr]` ends with the agent messages of the last turn taken."""
    history, pointer = output.get("history"), output.get("history_ptr")
    if not isinstance(history, list) or not isinstance(pointer, int) or \
            not 0 <= pointer <= len(history):
        return Verdict(Outcome.UNKNOWN)
    taken = history[:pointer]
    ends_with_sent = _ends_with(taken, sent)
    if previous is not None and _same(sent, previous):
        return Verdict(Outcome.UNKNOWN)   # the same turn twice in a row: no way to tell
    if ends_with_sent:
        chat = [item for item in history[pointer:] if isinstance(item, dict) and "role" in item]
        rewards = [item for item in history[pointer:]
                   if isinstance(item, dict) and "role" not in item and "reward" in item]
        status = SampleStatus.parse(output.get("status"))
        return Verdict(Outcome.APPLIED, WorkerEnvOutput(
            messages=chat, status=status.value, finish=status is not SampleStatus.RUNNING,
            reward=rewards[-1]["reward"] if rewards else 0.0,
            metric=rewards[-1].get("metrics") or {} if rewards else {}))
    if previous is not None and _ends_with(taken, previous):
        return Verdict(Outcome.NOT_APPLIED)
    if turns_before == 0 and pointer == 0 and not any(
            _essence(item) == _essence(sent[0]) for item in history if isinstance(item, dict)):
        return Verdict(Outcome.NOT_APPLIED)
    return Verdict(Outcome.UNKNOWN)


def _ends_with(items: list[Any], messages: list[Message]) -> bool:
    return (0 < len(messages) <= len(items)
            and _same(items[len(items) - len(messages):], messages))


def _same(a: list[Any], b: list[Message]) -> bool:
    return len(a) == len(b) and all(_essence(x) == _essence(y) for x, y in zip(a, b, strict=True))


def _essence(message: Any) -> tuple[Any, ...] | None:
    """What identifies an agent message however a worker re-serialised it."""
    if not isinstance(message, dict):
        return None
    calls = tuple((call.get("function") or {}).get("name", "") + "\0"
                  + str((call.get("function") or {}).get("arguments", ""))
                  for call in message.get("tool_calls") or () if isinstance(call, dict))
    content = message.get("content") or None
    if not isinstance(content, str | None):
        content = json.dumps(content, sort_keys=True, default=str)
    return (message.get("role"), content, calls)
