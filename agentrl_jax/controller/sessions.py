"""The controller's session table: O(1) lookup by id, one place where sessions end.

A session is RUNNING until `finish` gives it a final status; it then stays in the table for
`finished_session_ttl_s`, so that a late interact or cancel still gets a definite answer
(finish=true and the status) rather than "unknown session", and is dropped by `collect`.
"""

from __future__ import annotations

import asyncio
import collections
import itertools
import time
from typing import Any

from agentrl_jax.controller.fleet import WorkerRecord
from agentrl_jax.controller.wire import InteractResponse, Message, SampleIndex, SampleStatus


class SessionRecord:
    __slots__ = ("id", "name", "index", "worker", "created", "last_active", "busy", "call",
                 "status", "reward", "metrics", "finished_at", "turns", "last_turn")

    def __init__(self, session_id: int, name: str, index: SampleIndex,
                 worker: WorkerRecord) -> None:
        self.id = session_id
        self.name = name
        self.index = index                  # as the trainer gave it
        self.worker = worker
        self.created = self.last_active = time.monotonic()
        self.busy = True                    # a start or interact is in flight
        self.call: asyncio.Future[Any] | None = None   # that call, so it can be aborted
        self.status = SampleStatus.RUNNING
        self.reward = 0.0
        self.metrics: dict[str, Any] = {}
        self.finished_at: float | None = None
        self.turns = 0                      # interacts the worker has taken
        self.last_turn: list[Message] | None = None   # the messages of the last of them

    @property
    def running(self) -> bool:
        return self.status is SampleStatus.RUNNING

    def final_response(self) -> InteractResponse:
        return InteractResponse(finish=True, reward=self.reward, status=self.status.value,
                                metrics=self.metrics)

    def describe(self, now: float) -> dict[str, Any]:
        return {"session_id": self.id, "name": self.name, "index": self.index,
                "worker": self.worker.id, "status": self.status.value, "busy": self.busy,
                "age_s": round(now - self.created, 3),
                "idle_s": round(now - self.last_active, 3)}


class SessionTable:
    def __init__(self) -> None:
        self._sessions: dict[int, SessionRecord] = {}
        self._finished: collections.deque[tuple[float, int]] = collections.deque()
        # Ids start at the clock in ms, so a restarted controller does not reuse the ids of
        # sessions its workers may still hold.
        self._ids = itertools.count(int(time.time() * 1000))

    def __len__(self) -> int:
        return len(self._sessions)

    def __iter__(self):
        return iter(list(self._sessions.values()))

    def get(self, session_id: int) -> SessionRecord | None:
        return self._sessions.get(session_id)

    def open(self, name: str, index: SampleIndex, worker: WorkerRecord) -> SessionRecord:
        session = SessionRecord(next(self._ids), name, index, worker)
        self._sessions[session.id] = session
        worker.sessions.add(session.id)
        return session

    def discard(self, session: SessionRecord) -> None:
        """Forgets a session the trainer never heard of (its start failed)."""
        self._sessions.pop(session.id, None)
        session.worker.sessions.discard(session.id)

    def finish(self, session: SessionRecord, status: SampleStatus, reward: float = 0.0,
               metrics: dict[str, Any] | None = None) -> bool:
        """Ends a running session (False if it had already ended) and aborts its worker call."""
        if not session.running:
            return False
        session.status = SampleStatus.UNKNOWN if status is SampleStatus.RUNNING else status
        session.reward = reward
        session.metrics = metrics or {}
        session.finished_at = time.monotonic()
        session.worker.sessions.discard(session.id)
        self._finished.append((session.finished_at, session.id))
        if session.call is not None and not session.call.done():
            session.call.cancel()
        return True

    def collect(self, ttl_s: float) -> int:
        """Drops sessions finished more than `ttl_s` ago; returns how many."""
        cutoff, dropped = time.monotonic() - ttl_s, 0
        while self._finished and self._finished[0][0] < cutoff:
            _, session_id = self._finished.popleft()
            session = self._sessions.get(session_id)
            if session is not None and not session.running:
                del self._sessions[session_id]
                dropped += 1
        return dropped

    def counts(self) -> dict[str, int]:
        running = sum(1 for s in self._sessions.values() if s.running)
        return {"running": running, "finished": len(self._sessions) - running}
