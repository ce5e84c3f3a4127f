"""What the red-team tests share: raw HTTP calls on a task worker, as a malicious agent makes them.

The agent talks to the worker directly (no controller in between), so nothing upstream filters
what it sends: bodies are written byte for byte where the attack needs it.
"""

from __future__ import annotations

import concurrent.futures
import itertools
import json
import os
from typing import Any

import httpx

from environments.oracle import tool_call_message

_session_ids = itertools.count(1000)


def new_session_id() -> int:
    return next(_session_ids)


def start(api: str, index: int = 0, session_id: int | None = None,
          timeout_s: float = 120) -> tuple[int, dict[str, Any]]:
    """Starts an episode; (session id, the worker's first answer)."""
    session_id = new_session_id() if session_id is None else session_id
    response = httpx.post(f"{api}/start_sample", json={"index": index, "session_id": session_id},
                          timeout=timeout_s)
    response.raise_for_status()
    return session_id, response.json()


def interact_raw(api: str, body: bytes, timeout_s: float = 120) -> httpx.Response:
    return httpx.post(f"{api}/interact", content=body, timeout=timeout_s,
                      headers={"content-type": "application/json"})


def interact(api: str, session_id: int, message: dict[str, Any],
             timeout_s: float = 120) -> dict[str, Any]:
    """One turn; the worker's env_out. JSON is written with \\u escapes (ASCII), so any str,
    lone surrogates included, can be sent as the JSON text an agent would write."""
    body = json.dumps({"session_id": session_id, "messages": [message]}).encode()
    response = interact_raw(api, body, timeout_s)
    assert response.status_code == 200, response.text
    return response.json()["env_out"]


def call(name: str, arguments: dict[str, Any] | str, call_id: str = "0") -> dict[str, Any]:
    """An assistant message with one tool call (arguments as a dict or raw JSON text)."""
    return tool_call_message(name, arguments, call_id=call_id)


def cancel(api: str, session_id: int) -> None:
    httpx.post(f"{api}/cancel", json={"session_id": session_id}, timeout=30)


def tool_reply(env_out: dict[str, Any]) -> str:
    """The content of the first tool message of an answer ('' if none)."""
    return next((m["content"] for m in env_out["messages"] if m.get("role") == "tool"), "")


def current_sessions(api: str) -> int:
    return httpx.get(f"{api}/worker_status", timeout=30).json()["current"]


def sql(api: str, session_id: int, query: str) -> str:
    """The DB worker's reply to one `execute_sql` call."""
    return tool_reply(interact(api, session_id, call("execute_sql", {"query": query})))


def assert_endless_queries_starve_no_one(api: str, endless: str, hogs: int = 8) -> None:
    """`hogs` DB episodes each run `endless`, a query only the statement timeout would stop
    (more of them than the shared default thread pool of a small machine has threads); another
    episode's `SELECT 1` is answered while all still run, and ending them ends their queries."""
    sessions = [start(api)[0] for _ in range(hogs)]
    with concurrent.futures.ThreadPoolExecutor(hogs) as pool:
        running = [pool.submit(sql, api, hog, endless) for hog in sessions]
        victim, _ = start(api)
        assert sql(api, victim, "SELECT 1") == "[(1,)]"
        assert not any(future.done() for future in running)
        for hog in sessions:
            cancel(api, hog)
        for future in running:
            future.result()   # each interact is answered once its episode ended
    assert sql(api, victim, "SELECT 3") == "[(3,)]"
    cancel(api, victim)


def processes_with(*words: str) -> dict[int, str]:
    """{pid: state letter} of live processes whose command line holds all `words`, except
    this process's own children. A dead process not reaped yet (a zombie) counts as gone."""
    found = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as handle:
                cmdline = handle.read().replace(b"\0", b" ").decode(errors="replace")
            with open(f"/proc/{entry}/stat") as handle:
                state, parent = handle.read().rsplit(")", 1)[1].split()[:2]
        except OSError:
            continue
        if (all(word in cmdline for word in words) and state not in "ZX"
                and int(parent) != os.getpid()):
            found[int(entry)] = state
    return found
