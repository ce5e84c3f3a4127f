"""The controller's view of its task workers: registration by heartbeat, liveness, routing.

A worker is identified by (task name, address). Heartbeats register it and keep it ALIVE; a
worker silent past the heartbeat timeout becomes COMA (no new sessions; its sessions keep going
while it still answers probes); one that fails a probe, or whose connection is refused, is DEAD
and its sessions end with `task error`. Dead workers come back by heartbeating again.
"""

from __future__ import annotations

import dataclasses
import enum
import itertools
import time
from typing import Any

from agentrl_jax.controller.wire import HeartbeatRequest, SampleIndex


class WorkerState(enum.StrEnum):
    ALIVE = "alive"
    COMA = "coma"
    DEAD = "dead"


class IndicesMismatch(Exception):
    """A worker reports other indices than the live workers of its task."""


class UnknownIndex(Exception):
    pass


@dataclasses.dataclass(eq=False)
class WorkerRecord:
    id: str
    name: str
    address: str                   # the worker's API base, e.g. http://127.0.0.1:5021/api
    concurrency: int
    boot_id: str | None            # changes when the worker process restarts (ours only)
    last_heartbeat: float          # time.monotonic()
    state: WorkerState = WorkerState.ALIVE
    stale: bool = False            # drained by mark_stale: no new sessions
    full_until_sync: bool = False  # it answered 406 although we counted free slots
    probing: bool = False
    syncing: bool = False          # a reconciliation with it is in flight
    resync: bool = False           # ... and must run again when it is done
    sessions: set[int] = dataclasses.field(default_factory=set)   # running sessions here
    draining: int = 0              # cancelled sessions whose worker-side cancel is in flight

    @property
    def free(self) -> int:
        return self.concurrency - len(self.sessions) - self.draining

    @property
    def routable(self) -> bool:
        return (self.state is WorkerState.ALIVE and not self.stale
                and not self.full_until_sync and self.free > 0)

    def describe(self, now: float) -> dict[str, Any]:
        return {"id": self.id, "name": self.name, "address": self.address,
                "status": self.state.value, "stale": self.stale,
                "concurrency": self.concurrency, "current": len(self.sessions),
                "draining": self.draining, "heartbeat_age_s": round(now - self.last_heartbeat, 3)}


class TaskRecord:
    def __init__(self, name: str, indices: list[SampleIndex]) -> None:
        self.name = name
        self.workers: dict[str, WorkerRecord] = {}   # by address
        self.set_indices(indices)

    def set_indices(self, indices: list[SampleIndex]) -> None:
        self.indices = list(indices)
        # AgentRL: when every index is a string, the trainer sees 0..n-1 instead.
        self.string_indices = bool(indices) and all(isinstance(i, str) for i in indices)
        self._known = frozenset(self.indices)

    def trainer_indices(self) -> list[SampleIndex]:
        return list(range(len(self.indices))) if self.string_indices else self.indices

    def worker_index(self, index: SampleIndex, custom: bool = False) -> SampleIndex:
        """Maps the trainer's index to the worker's (the identity unless indices are strings).

        Raises UnknownIndex for an index the task's workers do not report; -1 with a custom
        task (AgentRL's caller-described episode) is the worker's to judge.
        """
        if custom and index == -1:
            return index
        if self.string_indices:
            if not isinstance(index, int) or not 0 <= index < len(self.indices):
                raise UnknownIndex(index)
            return self.indices[index]
        if index not in self._known:
            raise UnknownIndex(index)
        return index


class Fleet:
    """All tasks and their workers."""

    def __init__(self) -> None:
        self.tasks: dict[str, TaskRecord] = {}
        self._ids = itertools.count(1)

    def workers(self) -> list[WorkerRecord]:
        return [w for task in self.tasks.values() for w in task.workers.values()]

    def find(self, name: str, worker_id: str) -> WorkerRecord | None:
        task = self.tasks.get(name)
        if task is None:
            return None
        for worker in task.workers.values():
            if worker_id in (worker.id, worker.address):
                return worker
        return None

    def heartbeat(self, beat: HeartbeatRequest) -> tuple[WorkerRecord, bool, bool]:
        """Registers or refreshes a worker; returns (worker, restarted, revived).

        `restarted`: the same address now runs a new process, so its old sessions are gone.
        `revived`: the worker was declared dead and is back; it may hold sessions we ended.
        """
        now = time.monotonic()
        task = self.tasks.get(beat.name)
        if task is None:
            task = self.tasks[beat.name] = TaskRecord(beat.name, list(beat.indices))
        elif task.indices != beat.indices:
            others_live = any(w.state is not WorkerState.DEAD and w.address != beat.address
                              for w in task.workers.values())
            if others_live:
                raise IndicesMismatch(beat.name)
            task.set_indices(beat.indices)
        worker = task.workers.get(beat.address)
        restarted = revived = False
        if worker is None:
            worker = task.workers[beat.address] = WorkerRecord(
                id=f"{beat.name}-{next(self._ids)}", name=beat.name, address=beat.address,
                concurrency=beat.concurrency, boot_id=beat.worker_id, last_heartbeat=now)
        else:
            restarted = bool(beat.worker_id and worker.boot_id
                             and beat.worker_id != worker.boot_id)
            revived = worker.state is WorkerState.DEAD
        worker.concurrency = beat.concurrency
        worker.boot_id = beat.worker_id or worker.boot_id
        worker.last_heartbeat = now
        worker.state = WorkerState.ALIVE
        return worker, restarted, revived

    def choose(self, task: TaskRecord, exclude: set[int]) -> WorkerRecord | None:
        """The alive, non-stale worker with the most free capacity (None if there is none)."""
        best = None
        for worker in task.workers.values():
            if worker.routable and id(worker) not in exclude:
                if best is None or worker.free > best.free:
                    best = worker
        return best

    def forget_dead(self, older_than_s: float) -> None:
        cutoff = time.monotonic() - older_than_s
        for task in self.tasks.values():
            for address, worker in list(task.workers.items()):
                if (worker.state is WorkerState.DEAD and not worker.sessions
                        and not worker.draining and worker.last_heartbeat < cutoff):
                    del task.workers[address]
