"""The KG worker under an agent that builds an exploding query: the query stops at its deadline
or when its session is cancelled, and other sessions are served meanwhile and afterwards."""

from __future__ import annotations

import asyncio
import concurrent.futures
import time
from collections.abc import Iterator

import pytest

from environments.oracle import play_one, running_worker
from tests.security.red_team import call, cancel, interact, processes_with, start, tool_reply

DEADLINE_S = 600   # the cancel test's query must still run when it is cancelled
SHORT_DEADLINE_S = 5
RWANDA = "Rwanda"   # the entity of kg-test sample 0 ("What is the capital of Rwanda?")
BORDERS = "location.country.borders"


@pytest.fixture(scope="module")
def kg_task():
    from environments.kg import KnowledgeGraphTask

    task = KnowledgeGraphTask(split="test", query_processes=1)
    yield task
    asyncio.run(task.close())


@pytest.fixture(scope="module")
def kg_worker(kg_task) -> Iterator[str]:
    """One query process for the whole worker: a query that kept running would hold it."""
    with running_worker("kg", {"split": "test", "query_deadline_s": DEADLINE_S,
                               "query_processes": 1}) as api:
        assert kg_task.items[0]["entities"] == {RWANDA: "m.0cg3j4kb"}
        yield api


def _query_children() -> dict[int, str]:
    return processes_with("environments.kg.query_child")


def _hop(api: str, session_id: int, target: str) -> str:
    """get_neighbors over borders: #k = the neighbours of #(k-1). It lists the relations of
    its target first, a query whose rows each hop multiplies (9 hops: ~17 s unloaded)."""
    return tool_reply(interact(api, session_id, call("get_neighbors",
                                                      {"variable": target, "relation": BORDERS})))


def _build_chain(api: str, session_id: int, hops: int) -> None:
    target = RWANDA
    for hop in range(hops):
        reply = _hop(api, session_id, target)
        assert f"variable #{hop}" in reply, reply
        target = f"#{hop}"


@pytest.mark.slow   # waits a deadline out; tests/environments/kg covers it on a small graph
def test_an_exploding_query_stops_at_its_deadline():
    with running_worker("kg", {"split": "test", "query_deadline_s": SHORT_DEADLINE_S}) as api:
        session_id, _ = start(api, index=0)
        target, reply = RWANDA, ""
        for hop in range(14):   # whatever the machine's speed, some hop exceeds the deadline
            reply = _hop(api, session_id, target)
            if f"variable #{hop}" not in reply:
                break
            target = f"#{hop}"
        assert f"ran past its deadline of {SHORT_DEADLINE_S} s" in reply, reply
        # The session goes on, and its next (small) query is answered.
        out = interact(api, session_id, call("get_relations", {"variable": RWANDA}))
        assert BORDERS in tool_reply(out)


def test_cancelling_a_session_stops_its_running_query(kg_worker, kg_task):
    hog, _ = start(kg_worker, index=0)
    _build_chain(kg_worker, hog, 9)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        running = pool.submit(interact, kg_worker, hog, call("get_relations", {"variable": "#8"}))
        busy = {}
        for _ in range(200):   # the query process is at work on the hog's query
            busy = {pid: state for pid, state in _query_children().items() if state == "R"}
            if busy or running.done():
                break
            time.sleep(0.05)
        assert busy and not running.done()
        cancel(kg_worker, hog)
        for _ in range(200):   # SIGKILL was sent before cancel returned; wait for it to land
            if not set(busy) & set(_query_children()):
                break
            time.sleep(0.05)
        assert not set(busy) & set(_query_children()), "the hog's query process still runs"
        running.result()
    # The only query slot is free again: a normal episode plays to the end and wins.
    from environments.kg.oracle import Oracle

    record = play_one(kg_worker, Oracle(kg_task), 0, session_id=4242)
    assert record.success, record.reason()
