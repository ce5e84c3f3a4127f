"""The running episodes of one task worker, independent of HTTP.

Each session is one asyncio task running `Task.episode`. The table enforces the protocol's
rules: at most `concurrency` sessions (WorkerFull → 406), one call in flight per session
(SessionBusy → 400), a per-call timeout, and cancellation that always frees the slot: the entry
leaves the table before the episode is even told, so a task that swallows `CancelledError`
keeps running as an orphan but never holds capacity.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from agentrl_jax.controller.wire import Message, WorkerEnvOutput
from agentrl_jax.episode import SampleIndex, SampleStatus
from environments.worker.agent_input import InvalidAgentTurn, check_turn
from environments.worker.task import EpisodeResult, Session, Task

log = logging.getLogger(__name__)


class WorkerFull(Exception):
    pass


class SessionUnknown(Exception):
    pass


class SessionBusy(Exception):
    pass


class SessionExists(Exception):
    pass


class _Entry:
    __slots__ = ("session", "task", "busy", "last_active", "result", "turns")

    def __init__(self, session: Session) -> None:
        self.session = session
        self.task: asyncio.Task[None] | None = None
        self.busy = True
        self.last_active = time.monotonic()
        self.result: EpisodeResult | None = None   # set once, when the episode ends
        self.turns = 0   # agent turns delivered; lets a controller tell a lost reply apart


class EpisodeTable:
    """Starts, steps and cancels the episodes of one `Task`."""

    def __init__(self, task: Task, *, concurrency: int | None = None,
                 call_timeout_s: float | None = 240.0, idle_timeout_s: float | None = 660.0,
                 cancel_grace_s: float = 1.0) -> None:
        self.task = task
        self.concurrency = task.concurrency if concurrency is None else concurrency
        self.call_timeout_s = call_timeout_s
        self.idle_timeout_s = idle_timeout_s
        self.cancel_grace_s = cancel_grace_s
        self._entries: dict[int, _Entry] = {}
        self.orphans: set[asyncio.Task[None]] = set()   # cancelled episodes that did not stop

    # ------------------------------------------------------------------ queries

    @property
    def current(self) -> int:
        return len(self._entries)

    def sessions(self) -> dict[int, SampleIndex]:
        return {sid: entry.session.index for sid, entry in self._entries.items()}

    def status_of(self, session_id: int) -> dict[str, Any]:
        entry = self._get(session_id)
        return {"session_id": session_id, "index": entry.session.index,
                "status": {"waiting_for_env": entry.busy,
                           "waiting_for_agent": entry.session.waiting_for_agent,
                           "turns": entry.turns}}

    # ------------------------------------------------------------------ protocol calls

    async def start(self, session_id: int, index: SampleIndex,
                    custom_task: dict[str, Any] | None = None) -> WorkerEnvOutput:
        if session_id in self._entries:
            raise SessionExists(session_id)
        if len(self._entries) >= self.concurrency:
            raise WorkerFull(self.concurrency)
        entry = _Entry(Session(session_id, index))
        turn = entry.session.expect_turn()
        entry.task = asyncio.create_task(self._run(entry, custom_task))
        self._entries[session_id] = entry
        return await self._finish_call(entry, turn, SampleStatus.TASK_ERROR)

    async def interact(self, session_id: int, messages: list[Message]) -> WorkerEnvOutput:
        """Delivers the agent's turn; a turn no environment can act on ends the episode.

        A step that runs past the call timeout after the agent's turn is charged to the agent
        (`agent invalid action`): it is the agent's action that took that long. At the start
        nothing the agent did is running, so a timeout there is the environment's own.
        """
        entry = self._get(session_id)
        if entry.busy or not entry.session.waiting_for_agent:
            raise SessionBusy(session_id)
        try:
            check_turn(messages)
        except InvalidAgentTurn as error:
            await self.cancel(session_id, SampleStatus.AGENT_VALIDATION_FAILED, str(error))
            return self._output(entry)
        entry.busy = True
        entry.turns += 1
        turn = entry.session.expect_turn()
        entry.session.deliver(messages)
        return await self._finish_call(entry, turn, SampleStatus.AGENT_INVALID_ACTION)

    async def reject(self, session_id: int, reason: str) -> WorkerEnvOutput:
        """Ends a session whose turn could not even be read (see `agent_input`)."""
        entry = self._get(session_id)
        if entry.busy:
            raise SessionBusy(session_id)
        await self.cancel(session_id, SampleStatus.AGENT_VALIDATION_FAILED, reason)
        return self._output(entry)

    async def cancel(self, session_id: int, status: SampleStatus = SampleStatus.CANCELLED,
                     reason: str | None = None) -> None:
        """Ends a session now; its slot is free when this returns, whatever the episode does."""
        entry = self._entries.pop(session_id, None)
        if entry is None:
            raise SessionUnknown(session_id)
        if entry.result is None:
            entry.result = EpisodeResult(status, metrics={"error": reason} if reason else {})
        entry.session.mark_cancelled()   # wakes an interact waiting on this episode
        task = entry.task
        if task is None or task.done():
            return
        task.cancel()
        done, _ = await asyncio.wait({task}, timeout=self.cancel_grace_s)
        if not done:
            log.warning("episode of session %d ignored its cancellation; orphaned", session_id)
            self.orphans.add(task)
            task.add_done_callback(self.orphans.discard)
            # Such a task also swallows the cancellation asyncio sends every task at shutdown,
            # and the loop would wait for it forever; hide it from that final sweep.
            unregister = getattr(asyncio.tasks, "_unregister_task", None)
            if unregister is not None:
                unregister(task)

    async def cancel_all(self) -> None:
        await asyncio.gather(*(self.cancel(sid) for sid in list(self._entries)),
                             return_exceptions=True)

    async def expire_idle(self) -> int:
        """Cancels sessions the agent has left alone past the idle timeout; returns how many."""
        if self.idle_timeout_s is None:
            return 0
        deadline = time.monotonic() - self.idle_timeout_s
        stale = [sid for sid, e in self._entries.items() if not e.busy and e.last_active < deadline]
        for sid in stale:
            await self.cancel(sid, reason="idle timeout")
        return len(stale)

    # ------------------------------------------------------------------ internals

    def _get(self, session_id: int) -> _Entry:
        entry = self._entries.get(session_id)
        if entry is None:
            raise SessionUnknown(session_id)
        return entry

    async def _finish_call(self, entry: _Entry, turn: asyncio.Future[None],
                           timeout_status: SampleStatus) -> WorkerEnvOutput:
        """Waits until the episode yields to the agent or ends, then builds the answer."""
        try:
            await asyncio.wait_for(turn, self.call_timeout_s)
        except TimeoutError:
            if self._entries.get(entry.session.id) is entry:
                await self.cancel(entry.session.id, timeout_status,
                                  reason=f"step exceeded the call time limit of "
                                         f"{self.call_timeout_s} s")
        finally:
            entry.busy = False
            entry.last_active = time.monotonic()
        return self._output(entry)

    def _output(self, entry: _Entry) -> WorkerEnvOutput:
        session, result = entry.session, entry.result
        tools = session.tools if session.tools is not None else self.task.tools
        if result is None:
            return WorkerEnvOutput(messages=session.take_outbox(), tools=tools)
        return WorkerEnvOutput(messages=session.take_outbox(), tools=tools,
                               status=result.status.value, finish=True,
                               reward=result.reward, metric=result.metrics)

    async def _run(self, entry: _Entry, custom_task: dict[str, Any] | None) -> None:
        session = entry.session
        try:
            if session.index == -1 and custom_task is not None:
                result = await self.task.custom_episode(custom_task, session)
            else:
                result = await self.task.episode(session.index, session)
            if not isinstance(result, EpisodeResult) or result.status == SampleStatus.RUNNING:
                result = EpisodeResult(SampleStatus.TASK_ERROR,
                                       metrics={"error": f"episode returned {result!r}"})
        except asyncio.CancelledError:
            result = EpisodeResult(SampleStatus.CANCELLED)
        except Exception as error:  # a broken environment ends its episode, not the worker
            log.exception("episode of session %d failed", session.id)
            result = EpisodeResult(SampleStatus.TASK_ERROR,
                                   metrics={"error": f"{type(error).__name__}: {error}"})
        if entry.result is None:   # a cancellation already decided the outcome otherwise
            entry.result = result
        if self._entries.get(session.id) is entry:
            del self._entries[session.id]
        session.notify_ended()   # answers the call waiting for this turn, if any
