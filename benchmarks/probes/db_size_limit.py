"""Benchmark: how far a MariaDB episode's files go past its size limit, and what the guard costs.

    python -m benchmarks.probes.db_size_limit   # ~1 min; benchmarks/results/db_size_limit.json

Starts a private MariaDB server (`environments.db.mariadb_server`) and opens episodes with a
16 MB limit on the DB task's first test sample, as the worker does (`MySQLDatabase`). While
each attack runs, a thread reads the episode's files every 5 ms from the server owner's account.

- `long_statement_*`: one 400 MB `INSERT ... SELECT REPEAT(...)` (60 kB TEXT values): the peak
  while it runs (the one overshoot that depends on the host: what it writes within a size poll),
  and the files once the worker has rolled it back and rebuilt the table.
- `short_statements_*`: 2 MB inserts, 16 of them: the largest the files were after any one
  statement (the margin the tests assert on every host), and how many statements ran.
- `select1_*`: one `SELECT 1` through the guard (size reads, autocommit off, a commit) against
  the same statement on a plain PyMySQL connection: what the guard costs every statement.
"""

from __future__ import annotations

import asyncio
import statistics
import tempfile
import threading
import time

from benchmarks.machine_info import write_result
from environments.db.mariadb_server import MariaDBServer
from environments.db.mysql_database import MySQLDatabase, mysql_params
from environments.db.task import DBTask

LIMIT_MB = 16
ROW = "REPEAT('x', 60000)"


class SizeProbe:
    """Reads an episode's on-disk size every 5 ms on a thread; `peak` is the largest seen."""

    def __init__(self, server: MariaDBServer, database: str) -> None:
        self._conn = server.connect_as_owner()
        self._pattern = database.replace("_", "\\_") + "/%"
        self.peak = 0
        self._lock = threading.Lock()   # one connection, read from two threads
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def size(self) -> int:
        with self._lock, self._conn.cursor() as cursor:
            cursor.execute("SELECT COALESCE(SUM(FILE_SIZE), 0) FROM "
                           "information_schema.INNODB_SYS_TABLESPACES WHERE NAME LIKE %s",
                           (self._pattern,))
            return int(cursor.fetchone()[0])

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, self.size())
            time.sleep(0.005)

    def __enter__(self) -> SizeProbe:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self._conn.close()


async def open_episode(url: str, entry: dict) -> tuple[MySQLDatabase, str, str]:
    database = MySQLDatabase(url, size_limit_bytes=LIMIT_MB * 2**20)
    await database.create(entry)
    table = entry["table"][0] if isinstance(entry["table"], list) else entry["table"]
    column = table["table_info"]["columns"][0]["name"]
    return database, f"`{table['table_name']}`", f"`{column}`"


async def attacks(server: MariaDBServer, entry: dict) -> dict[str, float]:
    mb = 2**20
    figures: dict[str, float] = {"size_limit_mb": LIMIT_MB}

    database, table, column = await open_episode(server.admin_url, entry)
    insert = f"INSERT INTO {table} ({column}) SELECT {ROW} FROM seq_1_to_{{rows}}"
    with SizeProbe(server, database.database) as probe:
        start = time.perf_counter()
        reply = await database.execute(insert.format(rows=7000))
        figures["long_statement_s"] = round(time.perf_counter() - start, 2)
        after = probe.size()
    assert reply.startswith("Error: the database reached its size limit"), reply
    figures["long_statement_peak_mb"] = round(probe.peak / mb, 1)
    figures["long_statement_after_mb"] = round(after / mb, 1)
    await database.close()

    database, table, column = await open_episode(server.admin_url, entry)
    insert = f"INSERT INTO {table} ({column}) SELECT {ROW} FROM seq_1_to_34"
    largest, ran = 0, 0
    with SizeProbe(server, database.database) as probe:
        for _ in range(16):
            ran += await database.execute(insert) == "[]"
            largest = max(largest, probe.size())
    figures["short_statements_ran"] = ran
    figures["short_statements_max_after_mb"] = round(largest / mb, 1)
    figures["short_statements_peak_mb"] = round(probe.peak / mb, 1)
    figures["margin_mb"] = round(max(largest, after) / mb - LIMIT_MB, 1)

    guarded = []
    for _ in range(200):
        start = time.perf_counter()
        await database.execute("SELECT 1")
        guarded.append(time.perf_counter() - start)
    await database.close()

    import pymysql

    plain_conn = pymysql.connect(**mysql_params(server.admin_url), autocommit=True)
    plain = []
    with plain_conn.cursor() as cursor:
        for _ in range(200):
            start = time.perf_counter()
            cursor.execute("SELECT 1")
            cursor.fetchall()
            plain.append(time.perf_counter() - start)
    plain_conn.close()
    figures["select1_guarded_ms"] = round(1e3 * statistics.median(guarded), 3)
    figures["select1_plain_ms"] = round(1e3 * statistics.median(plain), 3)
    figures["guard_overhead_ratio"] = round(figures["select1_guarded_ms"]
                                            / figures["select1_plain_ms"], 1)
    return figures


def main() -> None:
    entry = DBTask(split="test").entry(0)
    with tempfile.TemporaryDirectory(prefix="mdb") as root, MariaDBServer(root) as server:
        figures = asyncio.run(attacks(server, entry))
    for key, value in figures.items():
        print(f"{key:32s} {value}")
    print(f"wrote {write_result('db_size_limit', figures)}")


if __name__ == "__main__":
    main()
