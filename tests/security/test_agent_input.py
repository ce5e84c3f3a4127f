"""Agent input a worker cannot act on ends the episode as the agent's failure, never a crash.

Each attack is sent to a real worker process over HTTP. The episode must end with a status the
trainer penalises (not `task error`, which it masks), and the worker must still serve a normal
episode afterwards.
"""

from __future__ import annotations

import json

import httpx
import pytest

from agentrl_jax import episode
from environments.worker.agent_input import MAX_ARGUMENT_CHARS, MAX_NESTING
from tests.security.red_team import call, interact, interact_raw, start, tool_reply

VALIDATION_FAILED = "agent validation failed"


def _echo_completes(api: str) -> None:
    session_id, _ = start(api, index=0)   # echo sample 0: one call to echo, reward 1
    out = interact(api, session_id, call("echo", {"text": "hello"}))
    assert out["finish"] and out["status"] == "completed" and out["reward"] == 1.0


def _body(session_id: int, message_json: str) -> bytes:
    return f'{{"session_id": {session_id}, "messages": [{message_json}]}}'.encode()


def _nested(depth: int) -> str:
    return "[" * depth + "]" * depth


DEEP = _nested(1000)
ATTACKS = {
    # A lone surrogate written as a JSON escape in the content: the wire parser refuses it.
    "surrogate_in_content": '{"role": "assistant", "content": "a\\ud800b"}',
    # ... and inside the arguments string, where only the environment's parse would see it.
    "surrogate_in_arguments": json.dumps(call("echo", '{"text": "\\udfff"}')),
    "deep_arguments": json.dumps(call("echo", '{"text": ' + DEEP + "}")),
    "deep_message": '{"role": "assistant", "content": "x", "extra": ' + DEEP + "}",
    "very_deep_message": '{"role": "assistant", "content": ' + _nested(100_000) + "}",
    "nesting_one_over": '{"role": "assistant", "content": "x", "extra": '
                        + _nested(MAX_NESTING) + "}",
}


@pytest.mark.parametrize("attack", sorted(ATTACKS))
def test_unusable_turn_is_agent_validation_failure(echo_worker, attack):
    session_id, _ = start(echo_worker, index=1)   # two turns: the episode is mid-way
    response = interact_raw(echo_worker, _body(session_id, ATTACKS[attack]))
    assert response.status_code == 200, response.text
    out = response.json()["env_out"]
    assert out["finish"] and out["status"] == VALIDATION_FAILED, out
    assert out["reward"] == 0.0 and out["metric"]["error"]
    assert episode.training_treatment(VALIDATION_FAILED) is episode.Treatment.PENALISED
    # The session is gone: another turn on it is refused, not served.
    assert interact_raw(echo_worker, _body(session_id, '{"role": "assistant"}')).status_code \
        == 400
    _echo_completes(echo_worker)


def test_nesting_at_the_limit_is_served(echo_worker):
    session_id, _ = start(echo_worker, index=0)
    depth = MAX_NESTING - 4   # the list of messages, the message and the call add levels
    arguments = '{"text": "ok", "pad": ' + _nested(depth) + "}"
    out = interact(echo_worker, session_id, call("echo", arguments))
    assert out["status"] == "completed" and tool_reply(out) == "ok"


def test_unreadable_body_without_a_session_is_422(echo_worker):
    assert interact_raw(echo_worker, b"{not json").status_code == 422
    assert interact_raw(echo_worker, b'{"messages": [{"role": "a\\ud800"}]}').status_code == 422
    _echo_completes(echo_worker)


def test_too_long_argument_is_refused_with_a_message(db_worker):
    session_id, _ = start(db_worker, index=0)
    query = "SELECT '" + "x" * (MAX_ARGUMENT_CHARS + 10) + "'"
    out = interact(db_worker, session_id, call("execute_sql", {"query": query}))
    assert not out["finish"]
    assert f"the limit is {MAX_ARGUMENT_CHARS}" in tool_reply(out)
    out = interact(db_worker, session_id, call("execute_sql", {"query": "SELECT 1"}))
    assert tool_reply(out) == "[(1,)]"


def test_worker_answers_are_always_json(echo_worker):
    """Whatever the agent sent, every answer the worker gives parses (no 500, no bad UTF-8)."""
    session_id, _ = start(echo_worker, index=3)   # four turns
    for text, echoed in (('"\\ud83d\\ude00"', "\U0001f600"), ('"\\u00e9\\u0000"', "\u00e9\x00")):
        message = json.dumps(call("echo", '{"text": ' + text + "}"))
        response = interact_raw(echo_worker, _body(session_id, message))
        assert response.status_code == 200
        out = json.loads(response.content.decode("utf-8"))["env_out"]
        assert not out["finish"] and tool_reply(out) == echoed
    assert httpx.get(f"{echo_worker}/worker_status").status_code == 200
