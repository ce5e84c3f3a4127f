"""WebShop's action parsing takes linear time and long arguments are refused, so no action
freezes the worker that serves every other session."""

from __future__ import annotations

import re

from hypothesis import given, settings
from hypothesis import strategies as st

from environments.oracle import play_one
from environments.webshop.oracle import Oracle
from environments.webshop.site import parse_action
from environments.worker.agent_input import MAX_ARGUMENT_CHARS
from tests.security.red_team import call, cancel, interact, start

WEBSHOP_PATTERN = re.compile(r"(.+)\[(.+)\]")   # WebShop's parse_action, the reference


@settings(max_examples=3000, deadline=None)
@given(st.text(alphabet="ab[]\n \r", max_size=16))
def test_parse_action_answers_as_the_webshop_regex(action):
    match = WEBSHOP_PATTERN.match(action)
    assert parse_action(action) == ((action, None) if match is None
                                    else (match.group(1), match.group(2)))


def _user_or_tool_text(out: dict) -> str:
    return "\n".join(m["content"] for m in out["messages"])


def test_backtracking_bait_is_answered_and_the_worker_serves_on(webshop_worker, webshop_task):
    bystander, _ = start(webshop_worker, index=1)
    attacker, _ = start(webshop_worker, index=0)
    bait = "[" * (MAX_ARGUMENT_CHARS - 100) + "\n"   # just under the length limit
    out = interact(webshop_worker, attacker, call("search_action", {"keywords": bait}))
    assert not out["finish"] and "Observation:" in _user_or_tool_text(out)
    out = interact(webshop_worker, bystander, call("search_action", {"keywords": "shoes"}))
    assert not out["finish"] and "Observation:" in _user_or_tool_text(out)
    for session_id in (attacker, bystander):
        cancel(webshop_worker, session_id)
    record = play_one(webshop_worker, Oracle(webshop_task), 2, session_id=77)
    assert record.success, record.reason()


def test_too_long_keywords_are_refused_with_a_message(webshop_worker):
    session_id, _ = start(webshop_worker, index=0)
    out = interact(webshop_worker, session_id,
                   call("search_action", {"keywords": "[" * (MAX_ARGUMENT_CHARS + 1)}))
    assert not out["finish"]
    assert f"the limit is {MAX_ARGUMENT_CHARS}" in _user_or_tool_text(out)
    out = interact(webshop_worker, session_id, call("search_action", {"keywords": "shoes"}))
    assert "Observation:" in _user_or_tool_text(out)
    cancel(webshop_worker, session_id)
