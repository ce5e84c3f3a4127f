"""Limits on what an agent may send a task worker, and how a breach is classified.

Model output is untrusted input. Two kinds of breach are told apart:

- a turn no environment can act on: text that is not valid Unicode (a lone surrogate such as
  `\\ud800`, which JSON can spell but UTF-8 cannot encode), JSON nested deeper than
  `MAX_NESTING`, or a turn larger than `MAX_TURN_CHARS`. The episode ends with
  `agent validation failed`, a status the trainer penalises like any unfinished episode, since
  the agent produced it; `task error` stays for the environment's own faults.
- one tool call whose arguments are longer than `MAX_ARGUMENT_CHARS`: the call is not run and
  the agent reads why (`argument_error`), at the cost of a round, as for malformed arguments.

Checks are linear in the size of the turn and never recurse on the agent's data, so no input can
exhaust the stack or the time of the worker that checks it.
"""

from __future__ import annotations

import json
import re
from typing import Any

MAX_ARGUMENT_CHARS = 64 * 1024     # one tool call's arguments (JSON text)
MAX_TURN_CHARS = 1024 * 1024       # all strings of one turn together
MAX_NESTING = 64                   # lists and objects inside one another, arguments included


_LEADING_SESSION_ID = re.compile(rb'\A\s*\{\s*"session_id"\s*:\s*(\d{1,18})\s*,')


class InvalidAgentTurn(ValueError):
    """The agent's turn breaks a limit above; the message says which, for the agent and logs."""


def argument_error(raw_arguments: str) -> str | None:
    """Why one call's arguments are refused before parsing, or None when they may be parsed."""
    if len(raw_arguments) > MAX_ARGUMENT_CHARS:
        return (f"Error: the tool call's arguments are {len(raw_arguments)} characters long; "
                f"the limit is {MAX_ARGUMENT_CHARS}. The call was not run.")
    return None


def json_nesting(text: str) -> int:
    """The deepest nesting of `[`/`{` in JSON text (brackets inside strings ignored)."""
    depth = deepest = 0
    in_string = escaped = False
    for char in text:
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif char in "]}":
            depth -= 1
    return deepest


def check_turn(messages: list[Any]) -> None:
    """Raises InvalidAgentTurn when the turn cannot be acted on (see the module docstring).

    Looks at the messages as received and at every tool call's arguments as they would parse,
    so that a `\\ud800` escape or a deep array inside the arguments string is caught too.
    """
    total = 0
    # (value, depth) pairs; an explicit stack, not recursion, whatever the nesting.
    stack: list[tuple[Any, int]] = [(messages, 1)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, (list, dict)):
            if depth > MAX_NESTING:
                raise InvalidAgentTurn(f"the message nests deeper than {MAX_NESTING} levels")
            items = value.values() if isinstance(value, dict) else value
            if isinstance(value, dict):
                stack.extend((key, depth) for key in value)
            stack.extend((item, depth + 1) for item in items)
        elif isinstance(value, str):
            total += len(value)
            if total > MAX_TURN_CHARS:
                raise InvalidAgentTurn(f"the turn is longer than {MAX_TURN_CHARS} characters")
            _check_unicode(value)
    for raw in _raw_arguments(messages):
        if argument_error(raw) is not None:
            continue   # refused per call, with a message, without ending the episode
        if json_nesting(raw) > MAX_NESTING:
            raise InvalidAgentTurn(f"tool call arguments nest deeper than {MAX_NESTING} levels")
        try:
            parsed = json.loads(raw)
        except ValueError:
            continue   # malformed JSON is the task's to answer, as AgentBench does
        if not _encodable(json.dumps(parsed, ensure_ascii=False)):
            raise InvalidAgentTurn("tool call arguments hold text that is not valid Unicode "
                                   "(a lone surrogate)")


def _raw_arguments(messages: list[Any]) -> list[str]:
    raws = []
    for message in messages:
        calls = message.get("tool_calls") if isinstance(message, dict) else None
        for call in calls if isinstance(calls, list) else []:
            function = call.get("function") if isinstance(call, dict) else None
            raw = function.get("arguments") if isinstance(function, dict) else None
            if isinstance(raw, str):
                raws.append(raw)
    return raws


def _encodable(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _check_unicode(text: str) -> None:
    if not _encodable(text):
        raise InvalidAgentTurn("the message holds text that is not valid Unicode "
                               "(a lone surrogate)")


def session_of_unreadable_turn(body: bytes) -> int | None:
    """The session an interact body names when the strict parser refused it, else None.

    Bodies the wire parser rejects (a raw lone surrogate, nesting beyond its recursion limit)
    are still the agent's turn; reading the session id lets the worker end that episode as the
    agent's failure instead of leaving the agent to retry. Python's parser accepts surrogates;
    for a body too deep even for it, the id is read from the head the controller writes first.
    """
    try:
        parsed = json.loads(body)
    except RecursionError:
        match = _LEADING_SESSION_ID.match(body)
        return int(match.group(1)) if match else None
    except ValueError:
        return None
    session_id = parsed.get("session_id") if isinstance(parsed, dict) else None
    if type(session_id) is not int or not isinstance(parsed.get("messages"), list):
        return None
    return session_id
