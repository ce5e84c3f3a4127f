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
from tests.security.red_team import call, cancel, interact, start, tool_reply

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


def sql(api: str, session_id: int, query: str) -> str:
    return tool_reply(interact(api, session_id, call("execute_sql", {"query": query})))


def test_the_server_does_not_run_as_root(server):
    with open(f"/proc/{server.pid}/status") as status:
        uid = next(line for line in status if line.startswith("Uid:")).split()[1]
    assert int(uid) != 0


def test_an_episode_cannot_see_or_write_another_episodes_database(worker):
    victim, _ = start(worker)
    victim_db = sql(worker, victim, "SELECT DATABASE()")[3:-4]   # "[('dbbench_…',)]"
    assert victim_db.startswith("dbbench_")
    sql(worker, victim, "CREATE TABLE secret(note TEXT)")
    sql(worker, victim, "INSERT INTO secret VALUES ('the answer is 42')")

    attacker, _ = start(worker)
    own_db = sql(worker, attacker, "SELECT DATABASE()")[3:-4]
    listed = sql(worker, attacker, "SHOW DATABASES")
    assert victim_db not in listed and own_db in listed
    for attack in (f"SELECT * FROM `{victim_db}`.secret",
                   f"INSERT INTO `{victim_db}`.secret VALUES ('forged')",
                   f"DROP TABLE `{victim_db}`.secret",
                   f"GRANT SELECT ON `{own_db}`.* TO '{victim_db}'@'localhost'",
                   "CREATE DATABASE dbbench_mine", "CREATE USER 'me'@'localhost'",
                   "SET GLOBAL max_connections = 1", "SELECT * FROM mysql.user"):
        assert "denied" in sql(worker, attacker, attack), attack
    assert sql(worker, victim, "SELECT * FROM secret") == "[('the answer is 42',)]"
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


def test_memory_tables_are_not_available(worker):
    session_id, _ = start(worker)
    reply = sql(worker, session_id, "CREATE TABLE ram(a TEXT) ENGINE=MEMORY")
    engine = sql(worker, session_id, "SELECT ENGINE FROM information_schema.TABLES "
                                     "WHERE TABLE_NAME = 'ram'")
    assert "cannot execute this statement" in reply and engine == "[]", (reply, engine)
    cancel(worker, session_id)


def test_ended_episodes_leave_no_user_or_database(worker, server):
    ids = [start(worker)[0] for _ in range(3)]
    for session_id in ids:
        sql(worker, session_id, "CREATE TABLE t(a INT)")
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


@pytest.fixture(scope="module")
def small_worker(server) -> Iterator[str]:
    """Episodes whose databases may take 16 MB; statements get long enough to write far more."""
    with running_worker("db", {"split": "test", "backend": server.admin_url,
                               "memory_limit_mb": SIZE_LIMIT_MB,
                               "statement_timeout_s": 60}) as api:
        yield api


def _tablespace_bytes(server: MariaDBServer, database: str) -> int:
    owner = server.connect_as_owner()
    try:
        with owner.cursor() as cursor:
            cursor.execute("SELECT COALESCE(SUM(FILE_SIZE), 0) FROM "
                           "information_schema.INNODB_SYS_TABLESPACES WHERE NAME LIKE %s",
                           (database.replace("_", "\\_") + "/%",))
            return int(cursor.fetchone()[0])
    finally:
        owner.close()


def test_filling_the_disk_stops_at_the_episodes_size_limit(small_worker, server):
    session_id, _ = start(small_worker)
    database = sql(small_worker, session_id, "SELECT DATABASE()")[3:-4]
    sql(small_worker, session_id, "CREATE TABLE fill(a LONGTEXT)")
    # 400 MB in one statement, and then more in small ones.
    reply = sql(small_worker, session_id,
                "INSERT INTO fill SELECT REPEAT('x', 1000000) FROM seq_1_to_400")
    assert reply.startswith("Error: the database reached its size limit of 16 MB"), reply
    assert sql(small_worker, session_id, "SELECT COUNT(*) FROM fill") == "[(0,)]"  # undone
    # A statement is stopped when it grows the files past the limit; one that fits in the space
    # a rolled-back statement left in them runs (the disk does not grow). So which of the three
    # is stopped depends on how far the first got before its poll; one of them must be.
    replies = [sql(small_worker, session_id,
                   "INSERT INTO fill SELECT REPEAT('y', 1000000) FROM seq_1_to_40")
               for _ in range(3)]
    assert any(r.startswith("Error: the database reached its size limit") for r in replies), (
        replies)
    # Far less than the 520 MB asked for reached the disk; reads still work. What passes the
    # limit is what the statement wrote between two size polls, which grows when the host is
    # busy and the poller is scheduled late (75 MB seen at load 5 on 2 cores), hence 8x.
    assert _tablespace_bytes(server, database) < 8 * SIZE_LIMIT_MB * 2**20
    assert sql(small_worker, session_id, "SELECT 1") == "[(1,)]"
    # Another episode is not affected by it.
    other, _ = start(small_worker)
    sql(small_worker, other, "CREATE TABLE t(a INT)")
    assert sql(small_worker, other, "INSERT INTO t VALUES (1)") == "[]"
    cancel(small_worker, session_id)
    cancel(small_worker, other)


def test_a_session_cannot_raise_its_temporary_table_size(worker):
    session_id, _ = start(worker)
    sql(worker, session_id, f"SET SESSION tmp_disk_table_size = {1 << 40}")
    assert sql(worker, session_id, "SELECT @@tmp_disk_table_size") == f"[({256 << 20},)]"
    cancel(worker, session_id)
