"""A session's database on a shared MySQL/MariaDB server, and the hard limit on its size.

Each episode gets a database and a user `dbbench_<random>` of its own (`mysql_accounts`); the
agent's SQL runs as that user on the session's thread, and the session's end drops both.

Size. MySQL has no per-user or per-database quota, so the worker keeps one, with transactions:

- The episode's user may read and change rows, drop or empty tables and make views, but not
  create or alter tables (`mysql_accounts.EPISODE_PRIVILEGES`; the worker creates the task's
  tables). Every statement that can grow the episode's files is then a transaction.
- The agent's connection runs with autocommit off, and the worker ends every statement itself.
  Before it commits, it reads the on-disk size of the episode's InnoDB tablespaces (its tables
  and their indexes; `information_schema.INNODB_SYS_TABLESPACES` shows the files' real sizes,
  hence `PROCESS` for the worker's account). A statement that leaves them over
  `size_limit_bytes` and larger than before is rolled back instead, however fast it ran, and
  the agent reads `SIZE_LIMIT_ERROR`. Statements that do not grow them (reads, deletes) run.
- A rolled-back statement's pages stay in the files, so the worker then rebuilds the episode's
  tables (`ALTER TABLE ... FORCE`, from its own account): between statements the files hold at
  most the limit plus the allocation slack of rebuilt tables, on any host. Rows the agent
  deleted are freed inside the files only later (InnoDB's purge), so when the rebuild left the
  files smaller than before the statement, the statement runs once more on them.
- While a long statement runs, the worker reads the size every `SIZE_POLL_S` and kills the
  statement once the files pass the limit. What it wrote within one poll is the one overshoot
  that depends on the host's speed; it lasts until the rollback and rebuild that follow.
- No statement keeps work open across statements: an explicit `START TRANSACTION` or
  `SET autocommit = 1` is ended by the worker's commit and by autocommit being set off again
  before the next statement, and an `XA START` (which a plain commit cannot end) costs the
  agent its connection, which rolls the XA transaction back. So the undo log, shared by all
  episodes, holds at most one statement per episode. Temporary tables, which live in the
  server's shared temporary tablespace, are not granted either.

Why not a size-limited filesystem under each episode's database: InnoDB treats running out of
space while it rolls a statement back as fatal. With an episode's database on a 16 MB tmpfs, a
400 MB `INSERT ... SELECT REPEAT(...)` into a LONGTEXT column stopped the whole server with
"[FATAL] InnoDB: Error (Out of disk space) in rollback": BLOB pages may take a tablespace's last
free extents, and the rollback's B-tree operations need one. A full filesystem would let any
agent stop every episode on the server.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import urllib.parse
from typing import Any

from environments.db.backends import (
    STATEMENT_TIMEOUT_S,
    Database,
    cell_value,
    column_type,
    tables_of,
    truncate,
)
from environments.db.grading import combine_table_hashes
from environments.db.mysql_accounts import (
    client_host,
    create_episode_account,
    drop_episode_account,
)
from environments.db.sqlite_guard import DEFAULT_MEMORY_LIMIT_BYTES
from environments.worker.blocking import SessionCalls

SIZE_POLL_S = 0.05   # how often the episode's size is read while one of its statements runs
SIZE_LIMIT_ERROR = ("Error: the database reached its size limit of {mb:.0f} MB; the statement "
                    "was stopped and its changes undone. Drop or empty tables to make room.")
TIMEOUT_ERROR = "Error: SQL execution timed out."

# Declared column types of the task format → the SQL types MySQL creates.
MYSQL_TYPES = {"INT": "BIGINT", "INTEGER": "BIGINT", "FLOAT": "DOUBLE", "REAL": "DOUBLE",
               "DOUBLE": "DOUBLE", "TEXT": "TEXT"}


def grew_past(limit: int, before: int, after: int) -> bool:
    """True when a statement took the episode's files from `before` to `after` bytes and they
    are now over `limit`: over the limit AND larger than before (a statement that shrinks an
    over-limit database, or leaves it as it was, is allowed)."""
    return after > limit and after > before


class MySQLDatabase(Database):
    """A database and a user `dbbench_<random>` on a shared server, dropped with the session.

    `url` is `mysql://USER:PASSWORD@HOST:PORT` (or `mariadb://…`, or `…?unix_socket=PATH`): the
    worker's account, which creates the episode's own user (`mysql_accounts`). Past its timeout
    a statement is killed; past `size_limit_bytes` its changes are undone (module docstring).
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
        self._conn = None      # the agent's connection, as the episode's user, autocommit off
        self._watcher = None   # the worker's own connection: sizes, kills, rebuilds

    def _connect(self, database: str | None, as_episode_user: bool = False):
        params = dict(self._params)
        if as_episode_user:
            params.update(user=self.database, password=self._password)
        conn = self._pymysql.connect(**params, database=database,
                                     autocommit=not as_episode_user, charset="utf8mb4",
                                     connect_timeout=10)
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
                self._create_tables(cursor, entry)   # the episode's user may not create tables
        finally:
            admin.close()
        self._conn = self._connect(self.database, as_episode_user=True)

    def _create_tables(self, cursor: Any, entry: dict[str, Any]) -> None:
        typed = bool(entry.get("typed_columns"))
        for table in tables_of(entry):
            name = f"{_quote_mysql(self.database)}.{_quote_mysql(table['table_name'])}"
            columns = table["table_info"]["columns"]
            spec = ", ".join(f"{_quote_mysql(n)} {column_type(c, typed, MYSQL_TYPES)}"
                             for n, c in zip(_mysql_columns(table), columns, strict=True))
            cursor.execute(f"CREATE TABLE IF NOT EXISTS {name} ({spec})")
            rows = table["table_info"]["rows"]
            if rows:
                marks = ", ".join(["%s"] * len(columns))
                cursor.executemany(f"INSERT INTO {name} VALUES ({marks})",
                                   [[cell_value(v, typed) for v in row] for row in rows])

    # ------------------------------------------------------------------ one agent statement

    async def execute(self, sql: str, timeout: float = STATEMENT_TIMEOUT_S) -> str:
        deadline = asyncio.get_running_loop().time() + timeout
        reply, compacted = await self._attempt(sql, deadline)
        if reply is None and compacted:
            # Rows deleted before are freed inside the files only later (InnoDB's purge); the
            # rebuild that followed the refusal compacted them away, so the statement may fit.
            reply, _ = await self._attempt(sql, deadline)
        return SIZE_LIMIT_ERROR.format(mb=self._size_limit_bytes / 2**20) if reply is None \
            else reply

    async def _attempt(self, sql: str, deadline: float) -> tuple[str | None, bool]:
        """Runs the statement and commits it: (its reply, False). When it grew the files past
        the limit, rolls it back and gives the space back: (None, whether the files are now
        smaller than before the statement)."""
        before = await asyncio.to_thread(self._database_bytes)
        running = asyncio.ensure_future(self._calls.run(self._execute, sql))
        stopped = await self._watch(running, before, deadline)
        if stopped is not None:
            # From the worker's account: the agent may have lifted its max_statement_time.
            await asyncio.to_thread(self._kill_running_query)
            await asyncio.wait({running}, timeout=10)   # the killed statement returns
        after = await asyncio.to_thread(self._database_bytes)
        if stopped == SIZE_LIMIT_ERROR or grew_past(self._size_limit_bytes, before, after):
            await self._calls.run(self._end_transaction, False)
            compacted = await asyncio.to_thread(self._give_back_space)
            return None, compacted < before
        await self._calls.run(self._end_transaction, True)
        return truncate(stopped or running.result()), False

    async def _watch(self, running: asyncio.Future, before: int,
                     deadline: float) -> str | None:
        """Waits for the statement; the reason to stop it (timeout, size), or None when it ended."""
        loop = asyncio.get_running_loop()
        while True:
            done, _ = await asyncio.wait(
                {running}, timeout=max(0.0, min(SIZE_POLL_S, deadline - loop.time())))
            if done:
                return None
            if loop.time() >= deadline:
                return TIMEOUT_ERROR
            size = await asyncio.to_thread(self._database_bytes)
            if grew_past(self._size_limit_bytes, before, size):
                return SIZE_LIMIT_ERROR

    def _execute(self, sql: str) -> str:
        try:
            self._conn.autocommit(False)   # the agent may have set it on: the worker commits
            with self._conn.cursor() as cursor:
                cursor.execute(sql)
                rows = cursor.fetchall() if cursor.description else ()
                return str(list(rows))
        except self._pymysql.err.Error as error:
            return str(error)

    def _end_transaction(self, commit: bool) -> None:
        """Commits or rolls back the statement; a transaction neither can end (an agent's
        `XA START`) ends with the connection, which rolls it back."""
        try:
            self._conn.commit() if commit else self._conn.rollback()
        except self._pymysql.err.Error:
            with contextlib.suppress(self._pymysql.err.Error, OSError):
                self._conn.close()
            self._conn = self._connect(self.database, as_episode_user=True)

    # ------------------------------------------------------------------ the worker's account

    def _watcher_cursor(self):
        if self._watcher is None:
            self._watcher = self._connect(None)
        return self._watcher.cursor()

    def _database_bytes(self) -> int:
        """The size on disk of the episode's tablespaces (its tables and their indexes)."""
        try:
            with self._watcher_cursor() as cursor:
                cursor.execute("SELECT COALESCE(SUM(FILE_SIZE), 0) FROM "
                               "information_schema.INNODB_SYS_TABLESPACES WHERE NAME LIKE %s",
                               (self.database.replace("_", "\\_") + "/%",))
                return int(cursor.fetchone()[0])
        except self._pymysql.err.Error:
            self._close_watcher()
            raise

    def _give_back_space(self) -> int:
        """After a refused statement, rebuilds the episode's tables so that the rolled-back
        (and deleted) rows' pages leave the files; the files' size then."""
        with self._watcher_cursor() as cursor:
            cursor.execute("SELECT TABLE_NAME FROM information_schema.TABLES WHERE "
                           "TABLE_SCHEMA = %s AND TABLE_TYPE = 'BASE TABLE'", (self.database,))
            for (table,) in cursor.fetchall():
                cursor.execute(f"ALTER TABLE {_quote_mysql(self.database)}."
                               f"{_quote_mysql(table)} FORCE")
        return self._database_bytes()

    def _kill_running_query(self) -> None:
        with contextlib.suppress(self._pymysql.err.Error):
            admin = self._connect(None)
            try:
                with admin.cursor() as cursor:
                    cursor.execute(f"KILL QUERY {int(self._conn.thread_id())}")
            finally:
                admin.close()

    # ------------------------------------------------------------------ grading and the end

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
        finally:
            self._end_transaction(True)   # no read view held open

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
        self._end_transaction(True)
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
