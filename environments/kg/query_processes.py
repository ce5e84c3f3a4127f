"""SPARQL queries on the embedded graph in child processes that a deadline or a cancel kills.

An agent chooses the programs the KG tools run, and a 10-hop `get_neighbors` chain is a query
that runs for minutes. A query inside pyoxigraph cannot be interrupted, so a thread running it
outlives its session and burns a core for nobody. Here each query runs in a child process that
opens the graph read-only from disk (a few milliseconds); the parent waits at most `deadline_s`
and otherwise kills the child, and closing a session kills the child running its query. Either
way the query's work stops at once, and a fresh child replaces the killed one on demand.

`processes` children at most serve the whole worker. Each session runs at most one query at a
time (its calls are sequential), so a session waits for a child at most for the queries ahead
of it, each bounded by the deadline: one session cannot hold the others off.
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

from environments.kg.owned_store import OwnedDir

DEFAULT_PROCESSES = 4
DEFAULT_DEADLINE_S = 30.0
STARTUP_TIMEOUT_S = 120.0   # a child imports pyoxigraph and opens the store; not a query's time
_REPO_ROOT = Path(__file__).resolve().parents[2]


class QueryDeadline(RuntimeError):
    """The query ran past its deadline and was stopped; the message is for the agent."""


class QueryCancelled(RuntimeError):
    """The session ended while its query ran; the query was stopped."""


class _Child:
    """`python -m environments.kg.query_child STORE_DIR`, started and ready."""

    def __init__(self, store_dir: str) -> None:
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(
            [str(_REPO_ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])}
        self.process = subprocess.Popen(
            [sys.executable, "-m", "environments.kg.query_child", store_dir],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, cwd=_REPO_ROOT)
        if self.answer(STARTUP_TIMEOUT_S) != ["ready"]:
            self.kill()
            raise RuntimeError("a KG query process did not start")

    def ask(self, mode: str, query: str) -> None:
        self.process.stdin.write((json.dumps([mode, query]) + "\n").encode())
        self.process.stdin.flush()

    def answer(self, timeout_s: float) -> Any:
        """The next answer; None past `timeout_s`; EOFError when the child died."""
        ready, _, _ = select.select([self.process.stdout], [], [], timeout_s)
        if not ready:
            return None
        line = self.process.stdout.readline()
        if not line:
            raise EOFError("the query process ended")
        return json.loads(line)

    def kill(self) -> None:
        self.process.kill()
        self.process.wait()
        for pipe in (self.process.stdin, self.process.stdout):
            try:
                pipe.close()
            except OSError:
                pass


class QueryProcesses:
    """A SPARQL backend over an on-disk copy of the graph, queried in killable children."""

    def __init__(self, store_dir: str, processes: int = DEFAULT_PROCESSES,
                 deadline_s: float = DEFAULT_DEADLINE_S, owned: OwnedDir | None = None) -> None:
        self.store_dir = store_dir
        self.deadline_s = deadline_s
        self._owned = owned   # the store's folder, removed on close (or by the next owner)
        self._slots = threading.BoundedSemaphore(processes)
        self._idle: list[_Child] = []
        self._lock = threading.Lock()

    @classmethod
    def from_ntriples(cls, data: bytes | str, **kwargs: Any) -> QueryProcesses:
        """Loads N-Triples into a fresh on-disk store in a temporary folder, removed on close,
        or by the next worker to start if this one is killed first (`owned_store`)."""
        import pyoxigraph

        owned = OwnedDir()
        store_dir = os.path.join(owned.path, "store")
        store = pyoxigraph.Store(store_dir)
        store.bulk_load(data.encode() if isinstance(data, str) else data,
                        format=pyoxigraph.RdfFormat.N_TRIPLES)
        store.flush()
        del store   # releases the database lock, so children can open it
        return cls(store_dir, owned=owned, **kwargs)

    def select(self, query: str) -> list[dict[str, str]]:
        """A query outside any session (e.g. reading the schema), under the same deadline."""
        return SessionQueries(self).select(query)

    def select_json(self, query: str) -> bytes:
        """The SPARQL JSON results of a SELECT (for the protocol endpoint)."""
        return SessionQueries(self).run("json", query).encode()

    def session(self) -> SessionQueries:
        return SessionQueries(self)

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
        for child in idle:
            child.kill()
        if self._owned is not None:
            self._owned.remove()

    # The sessions' side. --------------------------------------------------------------------

    def _acquire(self, scope: SessionQueries) -> _Child:
        while not self._slots.acquire(timeout=0.5):
            if scope.closed:
                raise QueryCancelled("the session ended while its query waited")
        with self._lock:
            if self._idle:
                return self._idle.pop()
        try:
            return _Child(self.store_dir)
        except BaseException:
            self._slots.release()
            raise

    def _release(self, child: _Child, reusable: bool) -> None:
        if reusable:
            with self._lock:
                self._idle.append(child)
        else:
            child.kill()
        self._slots.release()


class SessionQueries:
    """One episode's queries: `select` as a SparqlBackend; `close` stops the one running."""

    def __init__(self, pool: QueryProcesses) -> None:
        self._pool = pool
        self._lock = threading.Lock()
        self._running: _Child | None = None
        self.closed = False

    def select(self, query: str) -> list[dict[str, str]]:
        return self.run("rows", query)

    def run(self, mode: str, query: str) -> Any:
        child = self._pool._acquire(self)
        reusable = False
        try:
            with self._lock:
                if self.closed:
                    raise QueryCancelled("the session ended")
                self._running = child
            child.ask(mode, query)
            answer = child.answer(self._pool.deadline_s)
            if answer is None:
                raise QueryDeadline(f"the query ran past its deadline of "
                                    f"{self._pool.deadline_s:g} s and was stopped")
            reusable = True
        except (EOFError, OSError):
            raise QueryCancelled("the session ended while its query ran") from None
        finally:
            with self._lock:
                self._running = None
            self._pool._release(child, reusable and not self.closed)
        if answer[0] == "ok":
            return answer[1]
        _, kind, text = answer
        raise SyntaxError(text) if kind == "syntax" else ValueError(text)

    def close(self) -> None:
        """Kills the child running this session's query, if any; later queries are refused."""
        with self._lock:
            self.closed = True
            running = self._running
        if running is not None:
            running.process.kill()   # the waiting thread sees EOF and releases the slot

