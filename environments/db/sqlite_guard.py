"""What an agent's SQL may do on its SQLite database: nothing outside it, and within bounds.

SQLite statements can reach the host's filesystem: `ATTACH DATABASE '/any/path'` creates a file
(and one that outlives the episode lets episodes pass notes), `VACUUM INTO '/path'` writes one,
`load_extension()` loads code, and pragmas move temporary files or lift limits. `guard` makes a
connection refuse all of them:

- an authorizer denies ATTACH (VACUUM INTO attaches its target, so it is denied too), DETACH,
  `load_extension`, and every pragma except the read-only schema ones agents use to look around
  (`PRAGMA table_info(t)` ...); the agent reads an error saying what was refused;
- `SQLITE_LIMIT_ATTACHED` 0: no attached database even if the authorizer were bypassed;
- temporary tables and sort spills stay in memory (`temp_store = MEMORY`), never in files.

Memory: `max_page_count` caps each episode's database (tables, indexes, temporary tables) at
`memory_limit_bytes`, and `SQLITE_LIMIT_LENGTH` caps one value, so a `randomblob` table fails
with "database or disk is full" instead of eating the host. What a query holds while it runs
(sorts, hash tables) is bounded for the whole worker by SQLite's process-wide hard heap limit
(`set_worker_heap_limit`) and in time by the statement timeout.
"""

from __future__ import annotations

import sqlite3

DEFAULT_MEMORY_LIMIT_BYTES = 256 * 2**20    # one episode's database
MAX_VALUE_BYTES = 16 * 2**20                # one string or blob
DEFAULT_WORKER_HEAP_LIMIT_BYTES = 4 * 2**30  # all SQLite memory of one worker process

# Read-only pragmas that describe the schema; anything else (and any assignment) is refused.
READ_ONLY_PRAGMAS = frozenset({
    "table_info", "table_xinfo", "table_list", "index_list", "index_info", "index_xinfo",
    "foreign_key_list", "collation_list", "function_list", "pragma_list",
})
DENIED_FUNCTIONS = frozenset({"load_extension"})


def refusal(action: int, first: str | None, second: str | None) -> str | None:
    """Why the authorizer refuses this action, or None to allow it (SQLite's action codes)."""
    if action == sqlite3.SQLITE_ATTACH:
        return f"ATTACH (and VACUUM INTO) of {first!r} is not allowed: the task's database is " \
               "the only one"
    if action == sqlite3.SQLITE_DETACH:
        return "DETACH is not allowed"
    if action == sqlite3.SQLITE_PRAGMA and (
            (first or "").lower() not in READ_ONLY_PRAGMAS
            or ((first or "").lower() == "table_list" and second is not None)):
        return f"PRAGMA {first} is not allowed (read-only schema pragmas only)"
    if action == sqlite3.SQLITE_FUNCTION and (second or "").lower() in DENIED_FUNCTIONS:
        return f"{second}() is not allowed"
    return None


class Guard:
    """The authorizer of one connection; remembers the last refusal for the error message."""

    def __init__(self) -> None:
        self.last_refusal: str | None = None

    def __call__(self, action: int, first: str | None, second: str | None,
                 database: str | None, source: str | None) -> int:
        reason = refusal(action, first, second)
        if reason is None:
            return sqlite3.SQLITE_OK
        self.last_refusal = reason
        return sqlite3.SQLITE_DENY

    def explain(self, error: sqlite3.Error) -> str:
        """The agent's error text: SQLite's own, with what was refused when we refused it."""
        reason, self.last_refusal = self.last_refusal, None
        if reason is not None and ("not authorized" in str(error)
                                   or "authorization denied" in str(error)):
            return f"not authorized: {reason}"
        return str(error)


def guard(conn: sqlite3.Connection,
          memory_limit_bytes: int = DEFAULT_MEMORY_LIMIT_BYTES) -> Guard:
    """Applies the limits above to a fresh connection; returns its authorizer."""
    page_size = conn.execute("PRAGMA page_size").fetchone()[0]
    conn.execute("PRAGMA temp_store = MEMORY")
    for schema in ("main", "temp"):
        conn.execute(f"PRAGMA {schema}.max_page_count = {max(1, memory_limit_bytes // page_size)}")
    conn.setlimit(sqlite3.SQLITE_LIMIT_ATTACHED, 0)
    conn.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, MAX_VALUE_BYTES)
    authorizer = Guard()
    conn.set_authorizer(authorizer)
    return authorizer


_heap_limit_set: int | None = None


def set_worker_heap_limit(conn: sqlite3.Connection, limit_bytes: int) -> None:
    """SQLite's hard heap limit for this whole process (once per value; it is global)."""
    global _heap_limit_set
    if _heap_limit_set != limit_bytes:
        conn.execute(f"PRAGMA hard_heap_limit = {int(limit_bytes)}")
        _heap_limit_set = limit_bytes
