"""One database per session: SQLite (default) or a database on a shared MySQL/MariaDB server.

Both run blocking driver calls on the session's own thread (`SessionCalls`), so the worker
keeps serving other sessions and no session's queries wait behind another's. Both answer
`execute(sql)` the way AgentBench's dbbench does: the rows as `str(list_of_tuples)`, or the
error's text, cut at 800 characters with "[TRUNCATED]".

A table is created from a task's `table` entry. Like AgentBench, every column is TEXT unless the
task asks for its declared types (`typed_columns`, used by the generated tasks so that numeric
questions mean the same in SQLite and MySQL).
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import sqlite3
import time
import urllib.parse
from typing import Any

from environments.db.grading import combine_table_hashes, rows_hash
from environments.db.mysql_accounts import (
    client_host,
    create_episode_account,
    drop_episode_account,
)
from environments.db.sqlite_guard import (
    DEFAULT_MEMORY_LIMIT_BYTES,
    DEFAULT_WORKER_HEAP_LIMIT_BYTES,
    guard,
    set_worker_heap_limit,
)
from environments.worker.blocking import SessionCalls

RESULT_LIMIT = 800
STATEMENT_TIMEOUT_S = 60.0   # AgentBench wraps each statement in asyncio.wait_for(..., 60)
SIZE_POLL_S = 0.2            # how often a MySQL episode's size is read while a statement runs
SIZE_LIMIT_ERROR = ("Error: the database reached its size limit of {mb:.0f} MB; the statement "
                    "was stopped and its changes undone. Drop or empty tables to make room.")

# Declared column types of the task format → the SQL types our backends create.
_SQLITE_TYPES = {"INT": "INTEGER", "INTEGER": "INTEGER", "FLOAT": "REAL", "REAL": "REAL",
                 "DOUBLE": "REAL", "TEXT": "TEXT"}
_MYSQL_TYPES = {"INT": "BIGINT", "INTEGER": "BIGINT", "FLOAT": "DOUBLE", "REAL": "DOUBLE",
                "DOUBLE": "DOUBLE", "TEXT": "TEXT"}


def truncate(text: str) -> str:
    return text[:RESULT_LIMIT] + "[TRUNCATED]" if len(text) > RESULT_LIMIT else text


def tables_of(entry: dict[str, Any]) -> list[dict[str, Any]]:
    table = entry["table"]
    return table if isinstance(table, list) else [table]


def _column_type(column: dict[str, Any], typed: bool, mapping: dict[str, str]) -> str:
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
            spec = ", ".join(f"{_quote_sqlite(c['name'])} {_column_type(c, typed, _SQLITE_TYPES)}"
                             for c in columns)
            self._conn.execute(f"CREATE TABLE IF NOT EXISTS {name} ({spec})")
            marks = ", ".join("?" * len(columns))
            rows = table["table_info"]["rows"]
            self._conn.executemany(f"INSERT INTO {name} VALUES ({marks})",
                                   [[_cell(v, typed) for v in row] for row in rows])

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


def _cell(value: Any, typed: bool) -> Any:
    """A row value as stored: AgentBench inserts str(value); typed tables keep numbers."""
    if value is None:
        return None
    return value if typed and isinstance(value, (int, float)) else str(value)


# --------------------------------------------------------------------------- MySQL / MariaDB


class MySQLDatabase(Database):
    """A database and a user `dbbench_<random>` on a shared server, dropped with the session.

    `url` is `mysql://USER:PASSWORD@HOST:PORT` (or `mariadb://…`, or `…?unix_socket=PATH`): the
    worker's account, which creates the episode's own user (`mysql_accounts`); the agent's SQL
    runs as that user, on the session's thread. Past its timeout a statement is killed.

    Size: MySQL has no per-user or per-database quota, so the worker keeps one. While a statement
    runs it reads, every `SIZE_POLL_S`, the size of the episode's InnoDB tablespaces on disk
    (from its own account; `INNODB_SYS_TABLESPACES` shows the files' real sizes). A statement
    that grows them past `size_limit_bytes` is killed (and so rolled back); the agent reads
    `SIZE_LIMIT_ERROR`. Statements that do not grow them (reads, deletes) still run once the
    limit is reached. What escapes: what one statement writes within one poll, and what a
    statement shorter than a poll writes (the next statement that grows the files is stopped).
    """

    kind = "mysql"

    def __init__(self, url: str, statement_timeout_s: float = STATEMENT_TIMEOUT_S,
                 size_limit_bytes: int = DEFAULT_MEMORY_LIMIT_BYTES):
        import pymysql  # optional dependency: only the MySQL backend needs it

        self._pymysql = pymysql
        self._params = mysql_params(url)
        self.database = f"dbbench_{secrets.token_hex(8)}"   # also the episode user's name
        self._password = secrets.token_urlsafe(18)
        self._host = "localhost"
        self._statement_timeout_s = statement_timeout_s
        self._size_limit_bytes = size_limit_bytes
        self._calls = SessionCalls("mysql")
        self._conn = None
        self._watcher = None   # the worker's own connection that reads the database's size

    def _connect(self, database: str | None, as_episode_user: bool = False):
        params = dict(self._params)
        if as_episode_user:
            params.update(user=self.database, password=self._password)
        conn = self._pymysql.connect(**params, database=database, autocommit=True,
                                     charset="utf8mb4", connect_timeout=10)
        with conn.cursor() as cursor:
            # AgentBench's answer_md5 values were made with MySQL's default of 1024 bytes.
            cursor.execute("SET SESSION group_concat_max_len = 1024")
        return conn

    async def create(self, entry: dict[str, Any]) -> None:
        await self._calls.run(self._create, entry)

    def _create(self, entry: dict[str, Any]) -> None:
        admin = self._connect(None)
        try:
            with admin.cursor() as cursor:
                self._host = client_host(cursor)
                create_episode_account(cursor, self.database, self._password, self._host,
                                       self._statement_timeout_s)
        finally:
            admin.close()
        self._conn = self._connect(self.database, as_episode_user=True)
        typed = bool(entry.get("typed_columns"))
        with self._conn.cursor() as cursor:
            for table in tables_of(entry):
                name = _quote_mysql(table["table_name"])
                columns = table["table_info"]["columns"]
                spec = ", ".join(f"{_quote_mysql(n)} {_column_type(c, typed, _MYSQL_TYPES)}"
                                 for n, c in zip(_mysql_columns(table), columns, strict=True))
                cursor.execute(f"CREATE TABLE IF NOT EXISTS {name} ({spec})")
                rows = table["table_info"]["rows"]
                if rows:
                    marks = ", ".join(["%s"] * len(columns))
                    cursor.executemany(f"INSERT INTO {name} VALUES ({marks})",
                                       [[_cell(v, typed) for v in row] for row in rows])

    async def execute(self, sql: str, timeout: float = STATEMENT_TIMEOUT_S) -> str:
        before = await asyncio.to_thread(self._database_bytes)
        running = asyncio.ensure_future(self._calls.run(self._execute, sql))
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            done, _ = await asyncio.wait(
                {running}, timeout=max(0.0, min(SIZE_POLL_S, deadline - loop.time())))
            if done:
                return truncate(running.result())
            if loop.time() >= deadline:
                text = "Error: SQL execution timed out."
                break
            size = await asyncio.to_thread(self._database_bytes)
            if size > self._size_limit_bytes and size > before:
                text = SIZE_LIMIT_ERROR.format(mb=self._size_limit_bytes / 2**20)
                break
        # From the worker's account: the agent may have lifted its max_statement_time.
        await asyncio.to_thread(self._kill_running_query)
        await asyncio.wait({running}, timeout=10)   # the killed statement returns
        return truncate(text)

    def _database_bytes(self) -> int:
        """The size on disk of the episode's tablespaces (its tables and their indexes)."""
        try:
            if self._watcher is None:
                self._watcher = self._connect(None)
            with self._watcher.cursor() as cursor:
                cursor.execute("SELECT COALESCE(SUM(FILE_SIZE), 0) FROM "
                               "information_schema.INNODB_SYS_TABLESPACES WHERE NAME LIKE %s",
                               (self.database.replace("_", "\\_") + "/%",))
                return int(cursor.fetchone()[0])
        except self._pymysql.err.Error:
            self._close_watcher()
            raise

    def _execute(self, sql: str) -> str:
        try:
            with self._conn.cursor() as cursor:
                cursor.execute(sql)
                rows = cursor.fetchall() if cursor.description else ()
                return str(list(rows))
        except self._pymysql.err.Error as error:
            with contextlib.suppress(self._pymysql.err.Error):
                self._conn.rollback()
            return str(error)

    def _kill_running_query(self) -> None:
        with contextlib.suppress(self._pymysql.err.Error):
            admin = self._connect(None)
            try:
                with admin.cursor() as cursor:
                    cursor.execute(f"KILL QUERY {int(self._conn.thread_id())}")
            finally:
                admin.close()

    async def fetch_rows(self, table: dict[str, Any]) -> list[tuple]:
        return await self._calls.run(self._fetch_rows, table)

    def _fetch_rows(self, table: dict[str, Any]) -> list[tuple]:
        columns = ", ".join(map(_quote_mysql, _mysql_columns(table)))
        try:
            with self._conn.cursor() as cursor:
                cursor.execute(f"SELECT {columns} FROM {_quote_mysql(table['table_name'])}")
                return list(cursor.fetchall())
        except self._pymysql.err.Error:
            return []

    async def server_table_hash(self, entry: dict[str, Any]) -> str:
        """The hash computed by the server with AgentBench's own SQL (a cross-check)."""
        return await self._calls.run(self._server_table_hash, entry)

    def _server_table_hash(self, entry: dict[str, Any]) -> str:
        hashes = []
        with self._conn.cursor() as cursor:
            for table in tables_of(entry):
                columns = ",".join(map(_quote_mysql, _mysql_columns(table)))
                cursor.execute(
                    "SELECT md5(group_concat(rowhash ORDER BY rowhash)) AS hash FROM ("
                    f"SELECT substring(md5(concat_ws(',', {columns})), 1, 5) AS rowhash "
                    f"FROM {_quote_mysql(table['table_name'])}) AS sub")
                hashes.append(str(cursor.fetchone()[0]))
        return combine_table_hashes(hashes)

    async def close(self) -> None:
        """Drops the episode's account first: that also ends a statement still running."""
        try:
            await asyncio.to_thread(self._drop_account)
            await self._calls.run(self._close_connection)
        finally:
            self._calls.close()
            await asyncio.to_thread(self._close_watcher)

    def _close_watcher(self) -> None:
        with contextlib.suppress(self._pymysql.err.Error, OSError):
            if self._watcher is not None:
                self._watcher.close()
        self._watcher = None

    def _drop_account(self) -> None:
        with contextlib.suppress(self._pymysql.err.Error, OSError):
            admin = self._connect(None)
            try:
                with admin.cursor() as cursor:
                    drop_episode_account(cursor, self.database, self._host)
            finally:
                admin.close()

    def _close_connection(self) -> None:
        with contextlib.suppress(self._pymysql.err.Error, OSError):
            if self._conn is not None:
                self._conn.close()


def _quote_mysql(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def _mysql_columns(table: dict[str, Any]) -> list[str]:
    """Column names MySQL accepts: it rejects empty ones (one dev table has one), SQLite not."""
    names = [str(c["name"]).rstrip() for c in table["table_info"]["columns"]]
    return [name or f"column_{i + 1}" for i, name in enumerate(names)]


def mysql_params(url: str) -> dict[str, Any]:
    """pymysql.connect arguments from `mysql://user:password@host:port?unix_socket=path`."""
    parsed = urllib.parse.urlparse(url)
    if parsed.scheme not in ("mysql", "mariadb"):
        raise ValueError(f"not a MySQL URL: {url!r}")
    query = urllib.parse.parse_qs(parsed.query)
    params: dict[str, Any] = {
        "host": parsed.hostname or "127.0.0.1",
        "port": parsed.port or 3306,
        "user": urllib.parse.unquote(parsed.username or "root"),
        "password": urllib.parse.unquote(parsed.password or ""),
    }
    if "unix_socket" in query:
        params["unix_socket"] = query["unix_socket"][0]
    return params


def open_database(url: str | None, memory_limit_bytes: int = DEFAULT_MEMORY_LIMIT_BYTES,
                  statement_timeout_s: float = STATEMENT_TIMEOUT_S) -> Database:
    """A new session database: SQLite when `url` is None or "sqlite", else MySQL/MariaDB.

    `memory_limit_bytes` caps the episode's database: SQLite's in memory (see `sqlite_guard`),
    MySQL's tablespaces on disk (see `MySQLDatabase`).
    """
    if url in (None, "", "sqlite"):
        return SQLiteDatabase(memory_limit_bytes)
    return MySQLDatabase(url, statement_timeout_s, memory_limit_bytes)
