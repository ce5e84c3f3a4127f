"""The DB worker on SQLite, attacked through its HTTP API: no file outside the episode's
database, bounded memory and time, and no session starved by another's endless queries."""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from environments.db.backends import SQLiteDatabase
from environments.oracle import running_worker
from tests.security.red_team import (
    assert_endless_queries_starve_no_one,
    cancel,
    current_sessions,
    sql,
    start,
)

ENDLESS = "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT max(x) FROM c"


@pytest.fixture(scope="module")
def guarded_db_worker() -> Iterator[str]:
    """Small limits so that the attacks hit them fast: 8 MB per episode, 3 s per statement."""
    with running_worker("db", {"split": "test", "memory_limit_mb": 8,
                               "statement_timeout_s": 3}, concurrency=16) as api:
        yield api


@pytest.fixture
def target_dir() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="svc-attack-") as path:
        yield Path(path)


@pytest.mark.parametrize("statement", [
    "ATTACH DATABASE '{path}' AS x",
    "VACUUM INTO '{path}'",
    "SELECT load_extension('{path}')",
])
def test_no_file_outside_the_database(db_worker, target_dir, statement):
    path = target_dir / "note.db"
    session_id, _ = start(db_worker)
    reply = sql(db_worker, session_id, statement.format(path=path))
    assert reply.startswith("SQLite execution error: not authorized:"), reply
    assert not path.exists() and os.listdir(target_dir) == []
    # The table the agent could have written into an attached file is refused too.
    reply = sql(db_worker, session_id, "CREATE TABLE x.t(a)")
    assert "error" in reply.lower() and not path.exists()
    assert sql(db_worker, session_id, "SELECT 1") == "[(1,)]"
    cancel(db_worker, session_id)


@pytest.mark.parametrize("pragma", [
    "PRAGMA temp_store_directory = '{dir}'", "PRAGMA max_page_count = 1000000000",
    "PRAGMA temp_store = FILE", "PRAGMA main.journal_mode = WAL", "PRAGMA writable_schema = 1",
])
def test_pragmas_that_lift_limits_or_touch_files_are_refused(db_worker, target_dir, pragma):
    session_id, _ = start(db_worker)
    reply = sql(db_worker, session_id, pragma.format(dir=target_dir))
    assert reply.startswith("SQLite execution error: not authorized: PRAGMA"), reply
    assert os.listdir(target_dir) == []
    cancel(db_worker, session_id)


def test_schema_pragmas_still_answer(db_worker):
    session_id, _ = start(db_worker)
    sql(db_worker, session_id, "CREATE TABLE probe(a INTEGER, b TEXT)")
    assert sql(db_worker, session_id, "PRAGMA table_info(probe)").startswith("[(0, 'a'")
    assert "probe" in sql(db_worker, session_id, "SELECT name FROM pragma_table_list")
    cancel(db_worker, session_id)


@pytest.mark.parametrize("statement", [
    "CREATE TABLE big AS WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c "
    "LIMIT 1500) SELECT randomblob(1000000) AS b FROM c",
    "CREATE TEMP TABLE big AS WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c "
    "LIMIT 1500) SELECT randomblob(1000000) AS b FROM c",
    "SELECT length(randomblob(1500000000))",
])
def test_an_episode_cannot_hold_more_than_its_memory(guarded_db_worker, statement):
    session_id, _ = start(guarded_db_worker)
    reply = sql(guarded_db_worker, session_id, statement)
    assert "database or disk is full" in reply or "too big" in reply, reply
    assert sql(guarded_db_worker, session_id, "SELECT 1") == "[(1,)]"
    cancel(guarded_db_worker, session_id)


def test_statement_timeout_still_holds(guarded_db_worker):
    session_id, _ = start(guarded_db_worker)
    assert sql(guarded_db_worker, session_id, ENDLESS) == "Error: SQL execution timed out."
    assert sql(guarded_db_worker, session_id, "SELECT 2") == "[(2,)]"
    cancel(guarded_db_worker, session_id)


def test_a_runaway_statement_stops_at_its_deadline_while_others_are_served():
    """The statement timeout is what bounds one statement's CPU: a session's endless query
    returns at its deadline, and another session is answered while it runs."""
    with running_worker("db", {"split": "test", "statement_timeout_s": 10}) as api:
        hog, _ = start(api)
        other, _ = start(api)
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            running = pool.submit(sql, api, hog, ENDLESS)
            answered = [sql(api, other, f"SELECT {i}") for i in range(3)]
            served_meanwhile = not running.done()
            assert running.result() == "Error: SQL execution timed out."
        assert answered == ["[(0,)]", "[(1,)]", "[(2,)]"] and served_meanwhile
        assert sql(api, hog, "SELECT 4") == "[(4,)]"   # the session goes on after its timeout
        cancel(api, hog)
        cancel(api, other)


def test_endless_queries_of_some_sessions_do_not_starve_another(db_worker):
    assert_endless_queries_starve_no_one(db_worker, ENDLESS)
    assert current_sessions(db_worker) == 0


def test_closing_the_database_stops_its_running_statement():
    """An episode cancelled mid-query interrupts it: the statement returns (here with no
    timeout of its own, it would otherwise run forever) instead of burning CPU for nobody."""
    async def main() -> str:
        database = SQLiteDatabase()
        running = asyncio.ensure_future(database.execute(ENDLESS, timeout=float("inf")))
        await asyncio.sleep(0)
        await database.close()
        return await running

    assert asyncio.run(main()) == "Error: SQL execution timed out."
