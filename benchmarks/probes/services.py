"""Benchmark: what the service workers' containment costs and what it buys (issue 16, items 4-5).

    python -m benchmarks.probes.services   # ~1 min; writes benchmarks/results/services.json

Each figure runs the baseline and ours in the same process, one after the other:

- `webshop_parse_*`: WebShop's regex `(.+)\\[(.+)\\]` against `parse_action` on the backtracking
  bait `"[" * N + "\\n"` (the regex is quadratic in N, ours linear).
- `sqlite_victim_*`: the latency of one session's `SELECT 1` while eight other sessions run
  endless queries (stopped by a 3 s statement timeout), with every blocking call on Python's
  shared default executor (the previous design) and with one thread per session (ours).
- `kg_query_*`: the latency of a small SPARQL query in process (no deadline possible) and in a
  killable query process (ours): the price of being able to stop a query.
"""

from __future__ import annotations

import asyncio
import re
import sqlite3
import statistics
import time

from benchmarks.machine_info import write_result
from environments.db.backends import SQLiteDatabase
from environments.kg.query_processes import QueryProcesses
from environments.kg.sparql import EmbeddedStore
from environments.webshop.site import parse_action

ENDLESS = "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT max(x) FROM c"
HOGS = 8
TIMEOUT_S = 3.0


def webshop_parse(n: int = 20_000) -> dict[str, float]:
    bait = "search[" + "[" * n + "\n"
    pattern = re.compile(r"(.+)\[(.+)\]")
    start = time.perf_counter()
    assert pattern.match(bait) is None
    regex_s = time.perf_counter() - start
    start = time.perf_counter()
    for _ in range(100):
        assert parse_action(bait) == (bait, None)
    ours_s = (time.perf_counter() - start) / 100
    return {"webshop_parse_bait_chars": n, "webshop_parse_regex_s": regex_s,
            "webshop_parse_ours_s": ours_s, "webshop_parse_speedup": regex_s / ours_s}


def _timed_connection() -> tuple[sqlite3.Connection, list[float]]:
    conn = sqlite3.connect(":memory:", check_same_thread=False, isolation_level=None)
    deadline = [float("inf")]
    conn.set_progress_handler(lambda: int(time.monotonic() > deadline[0]), 10_000)
    return conn, deadline


def _run_shared(conn: sqlite3.Connection, deadline: list[float], sql: str) -> str:
    deadline[0] = time.monotonic() + TIMEOUT_S
    try:
        return str(conn.execute(sql).fetchall())
    except sqlite3.OperationalError as error:
        return str(error)


async def _victim_latency_shared_pool() -> float:
    """The previous design: every session's statements through `asyncio.to_thread`."""
    sessions = [_timed_connection() for _ in range(HOGS + 1)]
    hogs = [asyncio.ensure_future(asyncio.to_thread(_run_shared, conn, deadline, ENDLESS))
            for conn, deadline in sessions[:HOGS]]
    await asyncio.sleep(0.2)
    start = time.perf_counter()
    await asyncio.to_thread(_run_shared, *sessions[HOGS], "SELECT 1")
    latency = time.perf_counter() - start
    await asyncio.gather(*hogs)
    return latency


async def _victim_latency_per_session() -> float:
    databases = [SQLiteDatabase() for _ in range(HOGS + 1)]
    hogs = [asyncio.ensure_future(db.execute(ENDLESS, TIMEOUT_S)) for db in databases[:HOGS]]
    await asyncio.sleep(0.2)
    start = time.perf_counter()
    assert await databases[HOGS].execute("SELECT 1", TIMEOUT_S) == "[(1,)]"
    latency = time.perf_counter() - start
    await asyncio.gather(*hogs)
    for database in databases:
        await database.close()
    return latency


def sqlite_victim() -> dict[str, float]:
    shared = asyncio.run(_victim_latency_shared_pool())
    ours = asyncio.run(_victim_latency_per_session())
    return {"sqlite_victim_hogs": HOGS, "sqlite_victim_shared_pool_s": shared,
            "sqlite_victim_per_session_s": ours, "sqlite_victim_ratio": shared / ours}


def kg_query(repeats: int = 300) -> dict[str, float]:
    ns = "http://example.org/"
    graph = "".join(f"<{ns}{a}> <{ns}p> <{ns}{b}> .\n" for a in range(60) for b in range(60))
    query = f"SELECT ?b WHERE {{ <{ns}0> <{ns}p> ?b }}"
    in_process, processes = EmbeddedStore(graph), QueryProcesses.from_ntriples(graph)
    try:
        processes.select(query)   # the first query starts the child
        figures = {}
        for name, backend in (("in_process", in_process), ("query_process", processes)):
            times = []
            for _ in range(repeats):
                start = time.perf_counter()
                assert len(backend.select(query)) == 60
                times.append(time.perf_counter() - start)
            figures[f"kg_query_{name}_median_ms"] = statistics.median(times) * 1e3
    finally:
        processes.close()
    figures["kg_query_overhead_ms"] = (figures["kg_query_query_process_median_ms"]
                                       - figures["kg_query_in_process_median_ms"])
    return figures


def main() -> None:
    load = open("/proc/loadavg").read().split()[0]
    figures = {**webshop_parse(), **sqlite_victim(), **kg_query(),
               "load_average_1min_at_start": float(load)}
    path = write_result("services", figures)
    for key, value in sorted(figures.items()):
        print(f"{key:40s} {value:.6g}")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
