"""Queries in killable child processes: a deadline and a cancel stop the query itself."""

from __future__ import annotations

import os
import threading

import pytest

from environments.kg.query_processes import QueryCancelled, QueryDeadline, QueryProcesses

NS = "http://example.org/"
NODES = 60
# A complete directed graph: a path of k edges has NODES**k solutions, so five hops
# (~8e8 rows to count) run for minutes, while one hop answers at once.
GRAPH = "".join(f"<{NS}{a}> <{NS}p> <{NS}{b}> .\n" for a in range(NODES) for b in range(NODES))
ENDLESS = ("SELECT (COUNT(*) AS ?n) WHERE { ?a <%sp> ?b . ?b <%sp> ?c . ?c <%sp> ?d . "
           "?d <%sp> ?e . ?e <%sp> ?f }" % ((NS,) * 5))
ONE_HOP = f"SELECT (COUNT(*) AS ?n) WHERE {{ ?a <{NS}p> ?b }}"


@pytest.fixture
def pool():
    processes = QueryProcesses.from_ntriples(GRAPH, processes=1, deadline_s=1.0)
    yield processes
    processes.close()
    assert not os.path.exists(os.path.dirname(processes.store_dir))   # the owned folder too


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] not in "ZX"
    except OSError:
        return False


def test_rows_and_errors(pool):
    assert pool.select(ONE_HOP) == [{"n": str(NODES * NODES)}]
    with pytest.raises(SyntaxError):
        pool.select("SELEKT nothing")
    assert b'"vars"' in pool.select_json(ONE_HOP)


def test_a_query_past_its_deadline_is_killed_and_the_pool_serves_on(pool):
    pool.select(ONE_HOP)
    (child,) = pool._idle
    with pytest.raises(QueryDeadline, match="deadline of 1 s"):
        pool.select(ENDLESS)
    assert not _alive(child.process.pid) and pool._idle == []
    assert pool.select(ONE_HOP) == [{"n": str(NODES * NODES)}]   # a fresh child


def test_closing_a_session_kills_its_running_query(pool):
    pool.deadline_s = 3600.0
    session = pool.session()
    errors: list[BaseException] = []

    def run() -> None:
        try:
            session.select(ENDLESS)
        except BaseException as error:  # noqa: BLE001 - handed to the test thread
            errors.append(error)

    thread = threading.Thread(target=run)
    thread.start()
    while session._running is None and thread.is_alive():   # handed to a child yet?
        thread.join(0.01)
    pid = session._running.process.pid
    session.close()
    thread.join()
    assert len(errors) == 1 and isinstance(errors[0], QueryCancelled)
    assert not _alive(pid)
    with pytest.raises(QueryCancelled):
        session.select(ONE_HOP)   # a closed session runs nothing more
    assert pool.session().select(ONE_HOP) == [{"n": str(NODES * NODES)}]


def test_a_runaway_query_is_stopped_at_its_deadline_while_other_sessions_are_served():
    # Long enough that the other session's query surely ends first, even on a loaded host.
    pool = QueryProcesses.from_ntriples(GRAPH, processes=2, deadline_s=10.0)
    errors: list[BaseException] = []

    def run() -> None:
        try:
            pool.session().select(ENDLESS)
        except BaseException as error:  # noqa: BLE001 - handed to the test thread
            errors.append(error)

    try:
        runaway = threading.Thread(target=run)
        runaway.start()
        answer = pool.session().select(ONE_HOP)
        served_meanwhile = runaway.is_alive()
        runaway.join()
    finally:
        pool.close()
    assert answer == [{"n": str(NODES * NODES)}] and served_meanwhile
    assert len(errors) == 1 and isinstance(errors[0], QueryDeadline), errors
