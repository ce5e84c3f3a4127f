"""The DB worker on MariaDB, attacked through its HTTP API: each episode's user sees and
changes its own database only, touches no host file, and cannot outrun the statement timeout.

Skips when the MariaDB server binaries are not installed (`apt-get install mariadb-server`).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator

import pytest

from environments.db.mariadb_server import ADMIN_USER, INSTALL_DB, SERVER, MariaDBServer
from environments.oracle import running_worker
from tests.security.red_team import assert_endless_queries_starve_no_one, cancel, sql, start

pytest.importorskip("pymysql", reason="the MySQL backend needs PyMySQL")
pytestmark = pytest.mark.skipif(not (SERVER and INSTALL_DB),
                                reason="MariaDB server binaries not found")
STATEMENT_TIMEOUT_S = 3


@pytest.fixture(scope="module")
def server() -> Iterator[MariaDBServer]:
    root = tempfile.mkdtemp(prefix="mdb")   # short: a Unix socket path has ~100 bytes
    try:
        with MariaDBServer(root) as running:
            yield running
    finally:
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="module")
def worker(server) -> Iterator[str]:
    with running_worker("db", {"split": "test", "backend": server.admin_url,
                               "statement_timeout_s": STATEMENT_TIMEOUT_S}) as api:
        yield api


def test_the_server_does_not_run_as_root(server):
    with open(f"/proc/{server.pid}/status") as status:
        uid = next(line for line in status if line.startswith("Uid:")).split()[1]
    assert int(uid) != 0


def task_table(api: str, session_id: int) -> tuple[str, str]:
    """The episode's first task table and its first column (the DB task's columns are TEXT)."""
    table = sql(api, session_id, "SELECT TABLE_NAME, COLUMN_NAME FROM information_schema.COLUMNS "
                                 "WHERE TABLE_SCHEMA = DATABASE() ORDER BY TABLE_NAME, "
                                 "ORDINAL_POSITION LIMIT 1")
    name, column = eval(table)[0]   # noqa: S307 - "[('name', 'column')]" from our own worker
    return name, column


def test_an_episode_cannot_see_or_write_another_episodes_database(worker):
    victim, _ = start(worker)
    victim_db = sql(worker, victim, "SELECT DATABASE()")[3:-4]   # "[('dbbench_…',)]"
    assert victim_db.startswith("dbbench_")
    table, column = task_table(worker, victim)
    rows = sql(worker, victim, f"SELECT COUNT(*) FROM `{table}`")

    attacker, _ = start(worker)
    own_db = sql(worker, attacker, "SELECT DATABASE()")[3:-4]
    listed = sql(worker, attacker, "SHOW DATABASES")
    assert victim_db not in listed and own_db in listed
    for attack in (f"SELECT * FROM `{victim_db}`.`{table}`",
                   f"INSERT INTO `{victim_db}`.`{table}` (`{column}`) VALUES ('forged')",
                   f"DROP TABLE `{victim_db}`.`{table}`",
                   f"GRANT SELECT ON `{own_db}`.* TO '{victim_db}'@'localhost'",
                   "CREATE DATABASE dbbench_mine", "CREATE USER 'me'@'localhost'",
                   "SET GLOBAL max_connections = 1", "SELECT * FROM mysql.user"):
        assert "denied" in sql(worker, attacker, attack), attack
    assert sql(worker, victim, f"SELECT COUNT(*) FROM `{table}`") == rows
    cancel(worker, victim)
    cancel(worker, attacker)


def test_no_host_file_is_read_or_written(worker):
    target = tempfile.mktemp(prefix="svc-outfile-")
    session_id, _ = start(worker)
    assert sql(worker, session_id, "SELECT LOAD_FILE('/etc/passwd')") == "[(None,)]"
    reply = sql(worker, session_id, f"SELECT 'x' INTO OUTFILE '{target}'")
    assert "FILE privilege" in reply and not os.path.exists(target)
    reply = sql(worker, session_id, "LOAD DATA LOCAL INFILE '/etc/passwd' INTO TABLE t")
    assert "disabled the local infile capability" in reply, reply
    cancel(worker, session_id)


def test_lifting_its_own_statement_time_does_not_outrun_the_timeout(worker):
    session_id, _ = start(worker)
    sql(worker, session_id, "SET SESSION max_statement_time = 0")
    assert sql(worker, session_id, "SELECT SLEEP(600)") == "Error: SQL execution timed out."
    assert sql(worker, session_id, "SELECT 1") == "[(1,)]"
    cancel(worker, session_id)


@pytest.mark.parametrize("statement", [
    "CREATE TABLE t(a TEXT)", "CREATE TABLE ram(a TEXT) ENGINE=MEMORY",
    "CREATE TABLE copy AS SELECT * FROM `{table}`", "CREATE TEMPORARY TABLE tmp(a TEXT)",
    "ALTER TABLE `{table}` ADD COLUMN extra TEXT DEFAULT (REPEAT('x', 60000))",
    "CREATE INDEX i ON `{table}`(`{column}`(10))",
])
def test_an_episode_cannot_create_or_alter_tables(worker, statement):
    """Every statement that can grow the episode's files must be one the worker can roll back:
    DML only. DDL commits by itself."""
    session_id, _ = start(worker)
    table, column = task_table(worker, session_id)
    schema = ("SELECT TABLE_NAME, COLUMN_NAME FROM information_schema.COLUMNS "
              "WHERE TABLE_SCHEMA = DATABASE() ORDER BY 1, 2")
    before = sql(worker, session_id, schema)
    reply = sql(worker, session_id, statement.format(table=table, column=column))
    assert "denied" in reply, reply
    assert sql(worker, session_id, schema) == before
    cancel(worker, session_id)


def test_ended_episodes_leave_no_user_or_database(worker, server):
    ids = [start(worker)[0] for _ in range(3)]
    for session_id in ids:
        assert sql(worker, session_id, "CREATE VIEW v AS SELECT 1 AS one") == "[]"
        cancel(worker, session_id)
    owner = server.connect_as_owner()
    try:
        with owner.cursor() as cursor:
            cursor.execute("SELECT User FROM mysql.user WHERE User LIKE 'dbbench\\_%'")
            users = {row[0] for row in cursor.fetchall()}
            cursor.execute("SHOW DATABASES LIKE 'dbbench\\_%'")
            databases = cursor.fetchall()
    finally:
        owner.close()
    assert users == {ADMIN_USER} and databases == ()


SIZE_LIMIT_MB = 16
# What the episode's files may hold after any statement: the limit and the allocation slack of
# its rebuilt tables (InnoDB grows a file by up to 4 MB at a time at this size).
SIZE_MARGIN_MB = 4
ROW = "REPEAT('x', 60000)"   # near the most one TEXT value holds (65,535 bytes)


@pytest.fixture(scope="module")
def small_worker(server) -> Iterator[str]:
    """Episodes whose databases may take 16 MB; statements get long enough to write far more."""
    with running_worker("db", {"split": "test", "backend": server.admin_url,
                               "memory_limit_mb": SIZE_LIMIT_MB, "max_rounds": 50,
                               "statement_timeout_s": 60}) as api:
        yield api


def tablespace_bytes(server: MariaDBServer, database: str) -> int:
    """The episode's files on disk, read from the server owner's account."""
    owner = server.connect_as_owner()
    try:
        with owner.cursor() as cursor:
            cursor.execute("SELECT COALESCE(SUM(FILE_SIZE), 0) FROM "
                           "information_schema.INNODB_SYS_TABLESPACES WHERE NAME LIKE %s",
                           (database.replace("_", "\\_") + "/%",))
            return int(cursor.fetchone()[0])
    finally:
        owner.close()


class Filler:
    """An episode of `small_worker` that writes 60 kB TEXT values into its task table."""

    def __init__(self, api: str, server: MariaDBServer) -> None:
        self.api, self.server = api, server
        self.session_id, _ = start(api)
        self.database = sql(api, self.session_id, "SELECT DATABASE()")[3:-4]
        self.table, self.column = task_table(api, self.session_id)

    def run(self, query: str) -> str:
        return sql(self.api, self.session_id, query.format(table=f"`{self.table}`",
                                                          column=f"`{self.column}`"))

    def insert(self, rows: int) -> str:
        return self.run(f"INSERT INTO {{table}} ({{column}}) SELECT {ROW} FROM seq_1_to_{rows}")

    def filled(self) -> int:
        """How many 60 kB values the table holds."""
        return int(self.run("SELECT COUNT(*) FROM {table} WHERE LENGTH({column}) = 60000")[2:-3])

    def files_within_margin(self) -> bool:
        on_disk = tablespace_bytes(self.server, self.database)
        return on_disk <= (SIZE_LIMIT_MB + SIZE_MARGIN_MB) * 2**20

    def end(self) -> None:
        cancel(self.api, self.session_id)


def refused(reply: str) -> bool:
    return reply.startswith(f"Error: the database reached its size limit of {SIZE_LIMIT_MB} MB")


def test_one_long_statement_past_the_limit_is_stopped_and_undone(small_worker, server):
    """400 MB in one statement: stopped while it runs or refused when it ends, undone either
    way, and the files it grew are given back."""
    episode = Filler(small_worker, server)
    reply = episode.insert(7000)
    assert refused(reply), reply
    assert episode.filled() == 0
    assert episode.files_within_margin()
    assert episode.run("SELECT 1") == "[(1,)]"
    episode.end()


def test_every_short_statement_past_the_limit_is_refused(small_worker, server):
    """2 MB at a time, 30 times (60 MB asked for): the statements that fit run, every one after
    the first refused is refused too, however fast each ran, and after each the files are
    within the margin."""
    episode = Filler(small_worker, server)
    replies = []
    for _ in range(30):
        replies.append(episode.insert(34))
        assert episode.files_within_margin(), len(replies)
    first = next(i for i, reply in enumerate(replies) if refused(reply))
    assert all(reply == "[]" for reply in replies[:first]), replies
    assert all(refused(reply) for reply in replies[first:]), replies
    assert 0 < first and episode.filled() == 34 * first
    assert 34 * first * 60000 <= SIZE_LIMIT_MB * 2**20
    # Reads and deletes still run; emptying the table makes room again.
    assert episode.run("DELETE FROM {table} WHERE LENGTH({column}) = 60000") == "[]"
    assert episode.filled() == 0
    assert episode.insert(34) == "[]"
    episode.end()


@pytest.mark.parametrize("opening", [
    "START TRANSACTION", "SET autocommit = 1", "XA START 'x'",
])
def test_a_transaction_left_open_neither_escapes_the_limit_nor_outlives_its_statement(
        small_worker, server, opening):
    """The worker ends every statement: rows committed by a statement that fit stay, a
    statement past the limit is undone even with the agent's own transaction or autocommit, and
    no XA transaction can be prepared to outlive the episode."""
    episode = Filler(small_worker, server)
    episode.run(opening)
    assert episode.insert(34) == "[]"
    assert refused(episode.insert(400))
    assert episode.run("ROLLBACK") == "[]"
    assert episode.filled() == 34
    assert episode.files_within_margin()
    for step in ("XA END 'x'", "XA PREPARE 'x'"):
        episode.run(step)
    owner = server.connect_as_owner()
    try:
        with owner.cursor() as cursor:
            cursor.execute("XA RECOVER")
            assert cursor.fetchall() == ()
    finally:
        owner.close()
    episode.end()


def test_one_episode_at_its_limit_leaves_another_writing(small_worker, server):
    full, other = Filler(small_worker, server), Filler(small_worker, server)
    assert refused(full.insert(400))
    assert other.insert(34) == "[]" and other.filled() == 34
    full.end()
    other.end()


def test_endless_queries_of_some_episodes_do_not_starve_another(small_worker):
    assert_endless_queries_starve_no_one(small_worker, "SELECT SLEEP(600)")


def test_a_session_cannot_raise_its_temporary_table_size(worker):
    session_id, _ = start(worker)
    sql(worker, session_id, f"SET SESSION tmp_disk_table_size = {1 << 40}")
    assert sql(worker, session_id, "SELECT @@tmp_disk_table_size") == f"[({256 << 20},)]"
    cancel(worker, session_id)
