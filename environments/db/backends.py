"""One database per session: SQLite (default) or a database on a shared MySQL/MariaDB server
(`mysql_database`).

Both run blocking driver calls on the session's own thread (`SessionCalls`), so the worker
keeps serving other sessions and no session's queries wait behind another's. Both answer
`execute(sql)` the way AgentBench's dbbench does: the rows as `str(list_of_tuples)`, or the
error's text, cut at 800 characters with "[TRUNCATED]".

A table is created from a task's `table` entry. Like AgentBench, every column is TEXT unless the
task asks for its declared types (`typed_columns`, used by the generated tasks so that numeric
questions mean the same in SQLite and MySQL).
"""

from __future__ import annotations

import contextlib
import sqlite3
import time
from typing import Any

from environments.db.grading import combine_table_hashes, rows_hash
from environments.db.sqlite_guard import (
    DEFAULT_MEMORY_LIMIT_BYTES,
    DEFAULT_WORKER_HEAP_LIMIT_BYTES,
    guard,
    set_worker_heap_limit,
)
from environments.worker.blocking import SessionCalls

RESULT_LIMIT = 800
STATEMENT_TIMEOUT_S = 60.0   # AgentBench wraps each statement in asyncio.wait_for(..., 60)

# Declared column types of the task format → the SQL types SQLite creates.
SQLITE_TYPES = {"INT": "INTEGER", "INTEGER": "INTEGER", "FLOAT": "REAL", "REAL": "REAL",
                "DOUBLE": "REAL", "TEXT": "TEXT"}


def truncate(text: str) -> str:
    return text[:RESULT_LIMIT] + "[TRUNCATED]" if len(text) > RESULT_LIMIT else text


def tables_of(entry: dict[str, Any]) -> list[dict[str, Any]]:
    table = entry["table"]
    return table if isinstance(table, list) else [table]


def column_type(column: dict[str, Any], typed: bool, mapping: dict[str, str]) -> str:
    return mapping.get(str(column.get("type", "TEXT")).upper(), "TEXT") if typed else "TEXT"


class Database:
    """A session's database. `create(entry)`, `execute(sql)`..., `table_hash(entry)`, `close()`."""

    kind = ""

    async def create(self, entry: dict[str, Any]) -> None:
        raise NotImplementedError

    async def execute(self, sql: str, timeout: float = STATEMENT_TIMEOUT_S) -> str:
        raise NotImplementedError

    async def table_hash(self, entry: dict[str, Any]) -> str:
        """AgentBench's hash of the task's tables as they are now."""
        hashes = [rows_hash(await self.fetch_rows(t)) for t in tables_of(entry)]
        return combine_table_hashes(hashes)

    async def fetch_rows(self, table: dict[str, Any]) -> list[tuple]:
        raise NotImplementedError

    async def close(self) -> None:
        raise NotImplementedError


# --------------------------------------------------------------------------- SQLite


class SQLiteDatabase(Database):
    """A fresh in-memory SQLite database per session, fenced in by `sqlite_guard`.

    Nothing touches the disk; the session's statements run on its own thread, each interrupted
    at its timeout, and closing interrupts a statement still running.
    """

    kind = "sqlite"

    def __init__(self, memory_limit_bytes: int = DEFAULT_MEMORY_LIMIT_BYTES,
                 worker_heap_limit_bytes: int = DEFAULT_WORKER_HEAP_LIMIT_BYTES) -> None:
        self._calls = SessionCalls("sqlite")
        # Created here, used only on the session's thread (one call at a time).
        self._conn = sqlite3.connect(":memory:", check_same_thread=False, isolation_level=None)
        set_worker_heap_limit(self._conn, worker_heap_limit_bytes)
        self._guard = guard(self._conn, memory_limit_bytes)
        self._deadline = float("inf")
        self._closing = False
        self._conn.set_progress_handler(self._over_time, 10_000)

    def _over_time(self) -> int:
        # Non-zero interrupts the statement: past its deadline, or the session is closing.
        return int(self._closing or time.monotonic() > self._deadline)

    async def create(self, entry: dict[str, Any]) -> None:
        await self._calls.run(self._create, entry)

    def _create(self, entry: dict[str, Any]) -> None:
        typed = bool(entry.get("typed_columns"))
        for table in tables_of(entry):
            name = _quote_sqlite(table["table_name"])
            columns = table["table_info"]["columns"]
            spec = ", ".join(f"{_quote_sqlite(c['name'])} {column_type(c, typed, SQLITE_TYPES)}"
                             for c in columns)
            self._conn.execute(f"CREATE TABLE IF NOT EXISTS {name} ({spec})")
            marks = ", ".join("?" * len(columns))
            rows = table["table_info"]["rows"]
            self._conn.executemany(f"INSERT INTO {name} VALUES ({marks})",
                                   [[cell_value(v, typed) for v in row] for row in rows])

    async def execute(self, sql: str, timeout: float = STATEMENT_TIMEOUT_S) -> str:
        return await self._calls.run(self._execute, sql, timeout)

    def _execute(self, sql: str, timeout: float) -> str:
        self._deadline = time.monotonic() + timeout
        try:
            rows = self._conn.execute(sql).fetchall()
            text = str(rows)
        except sqlite3.OperationalError as error:
            text = ("Error: SQL execution timed out." if str(error) == "interrupted"
                    else f"SQLite execution error: {self._guard.explain(error)}")
        except sqlite3.Error as error:
            text = f"SQLite execution error: {self._guard.explain(error)}"
        except (ValueError, OverflowError, MemoryError) as error:
            text = f"SQLite execution error: {error}"
        finally:
            self._deadline = float("inf")
            if self._conn.in_transaction:   # an explicit BEGIN the agent left open
                with contextlib.suppress(sqlite3.Error):
                    self._conn.execute("COMMIT")
        return truncate(text)

    async def fetch_rows(self, table: dict[str, Any]) -> list[tuple]:
        return await self._calls.run(self._fetch_rows, table)

    def _fetch_rows(self, table: dict[str, Any]) -> list[tuple]:
        columns = ", ".join(_quote_sqlite(c["name"]) for c in table["table_info"]["columns"])
        try:
            return self._conn.execute(
                f"SELECT {columns} FROM {_quote_sqlite(table['table_name'])}").fetchall()
        except sqlite3.Error:
            return []   # the agent dropped or renamed the table: it hashes as empty

    async def close(self) -> None:
        self._closing = True     # a statement running now or queued stops at once
        self._conn.interrupt()
        try:
            await self._calls.run(self._close)
        finally:
            self._calls.close()

    def _close(self) -> None:
        with contextlib.suppress(sqlite3.Error):
            self._conn.close()


def _quote_sqlite(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def cell_value(value: Any, typed: bool) -> Any:
    """A row value as stored: AgentBench inserts str(value); typed tables keep numbers."""
    if value is None:
        return None
    return value if typed and isinstance(value, (int, float)) else str(value)


def open_database(url: str | None, memory_limit_bytes: int = DEFAULT_MEMORY_LIMIT_BYTES,
                  statement_timeout_s: float = STATEMENT_TIMEOUT_S) -> Database:
    """A new session database: SQLite when `url` is None or "sqlite", else MySQL/MariaDB.

    `memory_limit_bytes` caps the episode's database: SQLite's in memory (see `sqlite_guard`),
    MySQL's tablespaces on disk (see `MySQLDatabase`).
    """
    if url in (None, "", "sqlite"):
        return SQLiteDatabase(memory_limit_bytes)
    from environments.db.mysql_database import MySQLDatabase  # imports backends: not at the top

    return MySQLDatabase(url, statement_timeout_s, memory_limit_bytes)
