"""The controller's protocol operations: start, interact, cancel, heartbeat; no HTTP server here.

Every call to a worker goes through one client (`worker_http.WorkerHTTP`). A call in flight is
kept on its session (`SessionRecord.call`) so that the session can end while it waits: when
the worker is declared dead, or the trainer cancels, the call is aborted and the waiting
interact answers at once with the session's final status instead of hanging until a timeout.

A failed connection is not a failed worker: starts are repeated under new ids, and a lost
interact is judged from the worker's `sample_status` (`recovery`) before it is resent or the
session ends; only a worker that cannot be reached at all ends its sessions.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import time
import urllib.parse
from collections.abc import Coroutine
from typing import Any

from pydantic import ValidationError

from agentrl_jax.controller.config import ControllerConfig
from agentrl_jax.controller.fleet import (
    Fleet,
    IndicesMismatch,
    UnknownIndex,
    WorkerRecord,
    WorkerState,
)
from agentrl_jax.controller.recovery import Outcome, Verdict, judge_lost_interact
from agentrl_jax.controller.sessions import SessionRecord, SessionTable
from agentrl_jax.controller.wire import (
    HeartbeatRequest,
    InteractResponse,
    Message,
    SampleStatus,
    StartSampleRequest,
    StartSampleResponse,
    WorkerEnvOutput,
    WorkerInteractRequest,
    WorkerInteractResponse,
    WorkerSessionRequest,
    WorkerStartSampleRequest,
    agent_message_errors,
)
from agentrl_jax.controller.worker_http import (
    TRANSPORT_ERRORS,
    Reply,
    WorkerHTTP,
    reached_worker,
)

log = logging.getLogger(__name__)


_FULL = object()   # _start_on: the worker answered 406


class ControllerError(Exception):
    """An error the HTTP layer returns as `status_code` with `detail` (a string, or FastAPI's
    list of validation errors)."""

    def __init__(self, status_code: int, detail: str | list[dict[str, Any]]) -> None:
        super().__init__(str(detail))
        self.status_code = status_code
        self.detail = detail


class Controller:
    def __init__(self, config: ControllerConfig | None = None) -> None:
        self.config = config or ControllerConfig()
        self.fleet = Fleet()
        self.sessions = SessionTable()
        self.http = WorkerHTTP(self.config.interaction_timeout_s, self.config.max_connections)
        self._background: set[asyncio.Task[Any]] = set()

    async def close(self) -> None:
        for job in list(self._background):
            job.cancel()
        await self.http.close()

    def spawn(self, coroutine: Coroutine[Any, Any, Any]) -> None:
        """Runs fire-and-forget work (cancels, probes) without letting it be garbage-collected."""
        job = asyncio.create_task(coroutine)
        self._background.add(job)
        job.add_done_callback(self._background.discard)

    # ------------------------------------------------------------------ registration

    def receive_heartbeat(self, beat: HeartbeatRequest) -> dict[str, Any]:
        try:
            address = urllib.parse.urlsplit(beat.address)
            host = address.hostname
        except ValueError:
            address, host = None, None
        if address is None or address.scheme not in ("http", "https") or not host:
            raise ControllerError(400, f"worker address {beat.address!r} is not an http URL")
        try:
            worker, restarted, revived = self.fleet.heartbeat(beat)
        except IndicesMismatch:
            raise ControllerError(400, f"indices differ from the other workers of "
                                       f"{beat.name!r}") from None
        if restarted:
            # Its old sessions are lost, but not the ones the new process may already have
            # started before this beat arrived: what it holds tells them apart.
            log.warning("worker %s restarted", worker.id)
        if restarted or revived or (worker.boot_id is None and worker.sessions):
            # A worker without a boot id (AgentRL's) may have restarted unseen: what it still
            # holds says so, and the sessions it lost end now rather than at the next sync.
            self.spawn(self.reconcile(worker))
        return {"worker_id": worker.id, "status": "ok"}

    def mark_stale(self, name: str, worker_id: str, stale: bool) -> dict[str, Any]:
        worker = self.fleet.find(name, worker_id)
        if worker is None:
            raise ControllerError(404, f"no worker {worker_id!r} of task {name!r}")
        worker.stale = stale
        return {"worker_id": worker.id, "stale": stale}

    # ------------------------------------------------------------------ sessions

    def get_indices(self, name: str) -> list[Any]:
        task = self.fleet.tasks.get(name)
        if task is None:
            raise ControllerError(404, f"no task {name!r}")
        return task.trainer_indices()

    async def start_sample(self, request: StartSampleRequest) -> tuple[int, StartSampleResponse]:
        task = self.fleet.tasks.get(request.name)
        if task is None:
            raise ControllerError(404, f"no task {request.name!r}")
        try:
            worker_index = task.worker_index(request.index, request.custom_task is not None)
        except UnknownIndex:
            raise ControllerError(404, f"task {request.name!r} has no index {request.index!r}") \
                from None
        unreachable: set[int] = set()   # workers this start could not reach
        full: set[int] = set()
        while True:
            worker = self.fleet.choose(task, unreachable | full)
            if worker is None:
                alive = any(w.state is WorkerState.ALIVE and not w.stale
                            and id(w) not in unreachable for w in task.workers.values())
                raise ControllerError(406 if alive else 503,
                                      f"no {'free' if alive else 'alive'} worker for "
                                      f"{request.name!r}")
            started = await self._start_on(worker, request, worker_index)
            if started is _FULL:
                full.add(id(worker))
            elif started is None:
                unreachable.add(id(worker))
            else:
                return started

    async def _start_on(self, worker: WorkerRecord, request: StartSampleRequest,
                        worker_index: Any):
        """Starts on `worker`: (session id, response), `_FULL`, or None if it cannot be reached.

        A start is safe to repeat under a new session id: one whose request may have reached
        the worker is cancelled there first. So a failed attempt is repeated once on a fresh
        connection; a second failure probes the worker.
        """
        for attempt in range(2):
            session = self.sessions.open(request.name, request.index, worker)
            body = WorkerStartSampleRequest(index=worker_index, session_id=session.id,
                                            custom_task=request.custom_task)
            try:
                response = await self._guarded(session, self.http.post(
                    worker.address + "/start_sample", body.model_dump_json(),
                    fresh=attempt > 0))
            except TimeoutError:
                self.sessions.discard(session)
                self.spawn(self.cancel_on_worker(worker, session.id))
                return None
            except TRANSPORT_ERRORS as error:
                self.sessions.discard(session)
                if reached_worker(error):
                    self.spawn(self.cancel_on_worker(worker, session.id))
                log.info("start on %s failed (attempt %d): %r", worker.id, attempt + 1, error)
                continue
            finally:
                session.busy = False
            if response is None:   # the session ended meanwhile (its worker died)
                self.sessions.discard(session)
                return None
            if response.status == 406:   # full although we counted free slots: resync
                self.sessions.discard(session)
                worker.full_until_sync = True
                self.spawn(self.reconcile(worker))
                return _FULL
            if response.status != 200:
                self.sessions.discard(session)
                raise ControllerError(response.status if response.status < 500 else 502,
                                      f"worker {worker.id}: {response.text[:500]}")
            output = self._parse(session, response, WorkerEnvOutput)
            if output is None:
                raise ControllerError(502, f"worker {worker.id} sent a malformed answer")
            if output.finish:
                self.sessions.finish(session, SampleStatus.parse(output.status), output.reward,
                                     output.metric)
            return session.id, StartSampleResponse(
                messages=output.messages, tools=output.tools, finish=not session.running,
                status=session.status.value, reward=output.reward, metrics=output.metric)
        await self.probe(worker)
        return None

    async def interact(self, session_id: int, messages: list[Message]) -> InteractResponse:
        session = self._session(session_id)
        if not session.running:
            return session.final_response()
        if session.busy:
            raise ControllerError(400, "a call on this session is in flight")
        if errors := agent_message_errors(messages):
            raise ControllerError(422, errors)   # never forwarded; the session goes on
        session.busy = True
        try:
            return await self._interact(session, messages)
        finally:
            session.busy = False
            session.last_active = time.monotonic()

    async def _interact(self, session: SessionRecord, messages: list[Message]) -> InteractResponse:
        body = WorkerInteractRequest(session_id=session.id, messages=messages).model_dump_json()
        url = session.worker.address + "/interact"
        response: Reply | WorkerEnvOutput | None
        try:
            response = await self._guarded(session, self.http.post(url, body))
        except TimeoutError:
            self._end_on_worker_error(session, f"worker call exceeded "
                                               f"{self.config.interaction_timeout_s} s")
            return session.final_response()
        except TRANSPORT_ERRORS as error:
            response = await self._recover_interact(session, messages, body, error)
        if not session.running or response is None:
            return session.final_response()
        if isinstance(response, WorkerEnvOutput):
            return self._took_turn(session, messages, response)
        if response.status == 422:   # the worker rejects these messages; session goes on
            raise ControllerError(422, _worker_detail(response))
        if response.status >= 500:
            # AgentRL's worker answers 500 to messages its models refuse, before the episode
            # sees them: if the session stands where it stood, it goes on.
            verdict = await self._judge(session, messages)
            if verdict is not None and verdict.outcome is Outcome.NOT_APPLIED:
                raise ControllerError(422, f"the worker could not take these messages "
                                           f"(it answered {response.status}: "
                                           f"{response.text[:300]}); the session goes on")
        if response.status != 200:
            self._end_on_worker_error(session, f"worker answered {response.status}: "
                                               f"{response.text[:200]}")
            return session.final_response()
        parsed = self._parse(session, response, WorkerInteractResponse)
        if parsed is None:
            return session.final_response()
        return self._took_turn(session, messages, parsed.env_out)

    def _took_turn(self, session: SessionRecord, messages: list[Message],
                   out: WorkerEnvOutput) -> InteractResponse:
        session.turns += 1
        session.last_turn = messages
        if out.finish:
            self.sessions.finish(session, SampleStatus.parse(out.status), out.reward, out.metric)
        return InteractResponse(finish=not session.running, reward=out.reward,
                                status=session.status.value, messages=out.messages,
                                metrics=out.metric)

    async def _recover_interact(self, session: SessionRecord, messages: list[Message],
                                body: str, error: BaseException) -> Reply | WorkerEnvOutput | None:
        """After a failed interact: the worker's answer, the rebuilt reply, or None (ended).

        One that certainly did not reach the worker is sent again on a fresh connection; one
        that may have is judged from the worker's session status (`recovery`) and sent again
        only when the worker shows it never took it. Up to `retry_attempts` rounds, with
        back-off; then the worker counts as unreachable.
        """
        url = session.worker.address + "/interact"
        for attempt in range(self.http.retry_attempts):
            if attempt:
                await asyncio.sleep(self.http.retry_backoff_s * 2 ** (attempt - 1))
            verdict = Verdict(Outcome.NOT_APPLIED) if not reached_worker(error) else \
                await self._judge(session, messages)
            if verdict is None:
                return None
            if verdict.outcome is Outcome.APPLIED and verdict.output is not None:
                return verdict.output
            if verdict.outcome is not Outcome.NOT_APPLIED:
                self._end_on_worker_error(session, f"the reply to this turn was lost "
                                                   f"({verdict.outcome.value} on the worker): "
                                                   f"{error!r}")
                return None
            try:
                return await self._guarded(session, self.http.post(url, body, fresh=True))
            except TimeoutError:
                self._end_on_worker_error(session, f"worker call exceeded "
                                                   f"{self.config.interaction_timeout_s} s")
                return None
            except TRANSPORT_ERRORS as again:
                error = again
        self._lost_worker(session, error)
        return None

    async def _judge(self, session: SessionRecord, messages: list[Message]) -> Verdict | None:
        """What the worker did with `messages` (polling while it is still at it); None if the
        session ended meanwhile or the worker cannot be reached (which ends it)."""
        worker = session.worker
        body = WorkerSessionRequest(session_id=session.id).model_dump_json()
        deadline = time.monotonic() + self.config.interaction_timeout_s
        for attempt in itertools.count():
            try:
                # The call's own timeout: a worker slow to answer is not a lost one.
                reply = await self._guarded(session, self.http.call(
                    "POST", worker.address + "/sample_status", body))
            except TRANSPORT_ERRORS as error:   # TimeoutError included
                self._lost_worker(session, error)
                return None
            if reply is None:
                return None
            verdict = judge_lost_interact(_status_json(reply), messages, session.last_turn,
                                          session.turns)
            if verdict.outcome is not Outcome.IN_PROGRESS or time.monotonic() > deadline:
                return verdict
            await asyncio.sleep(min(0.05 * 2 ** attempt, 1.0))
        raise AssertionError("unreachable")

    def cancel(self, session_id: int) -> dict[str, Any]:
        session = self._session(session_id)
        if self.sessions.finish(session, SampleStatus.CANCELLED):
            self.spawn(self.cancel_on_worker(session.worker, session.id))
        return {"session_id": session_id, "status": session.status.value}

    def cancel_notice(self, session_id: int) -> dict[str, Any]:
        """A worker cancelled a session itself (`cancel_with_notice`): it ends as cancelled."""
        session = self.sessions.get(session_id)
        if session is not None:
            self.sessions.finish(session, SampleStatus.CANCELLED,
                                 metrics={"error": "cancelled by the worker"})
        return {}

    async def cancel_all(self, name: str | None, force: bool) -> dict[str, Any]:
        if name is None and not force and len(self.fleet.tasks) > 1:
            raise ControllerError(403, "several tasks are served: give name=T or force=true")
        names = [name] if name is not None else list(self.fleet.tasks)
        cancelled = 0
        for session in self.sessions:
            if session.running and session.name in names:
                cancelled += self.sessions.finish(session, SampleStatus.CANCELLED)
        workers = [w for n in names if n in self.fleet.tasks
                   for w in self.fleet.tasks[n].workers.values()
                   if w.state is not WorkerState.DEAD]
        await asyncio.gather(*(self.http.call("POST", w.address + "/cancel_all", b"{}",
                                              self.config.probe_timeout_s)
                               for w in workers), return_exceptions=True)
        return {"cancelled": cancelled}

    # ------------------------------------------------------------------ failure handling

    def end_session(self, session: SessionRecord, status: SampleStatus, reason: str) -> None:
        """Ends a running session here and, in the background, on its worker."""
        if self.sessions.finish(session, status, metrics={"error": reason}):
            self.spawn(self.cancel_on_worker(session.worker, session.id))

    def fail_sessions(self, worker: WorkerRecord, reason: str) -> int:
        ended = 0
        for session_id in list(worker.sessions):
            session = self.sessions.get(session_id)
            if session is not None:
                ended += self.sessions.finish(session, SampleStatus.TASK_ERROR,
                                              metrics={"error": reason})
        return ended

    def declare_dead(self, worker: WorkerRecord, reason: str) -> None:
        if worker.state is not WorkerState.DEAD:
            log.warning("worker %s (%s) is dead: %s", worker.id, worker.address, reason)
        worker.state = WorkerState.DEAD
        self.fail_sessions(worker, f"worker died: {reason}")

    async def probe(self, worker: WorkerRecord) -> bool:
        """Asks a silent or failing worker for its status; declares it dead if it cannot answer."""
        if worker.probing:
            return True
        worker.probing = True
        try:
            response = await self.http.call("GET", worker.address + "/worker_status",
                                            timeout_s=self.config.probe_timeout_s)
            alive = response.status == 200
        except TRANSPORT_ERRORS:
            alive = False
        finally:
            worker.probing = False
        if not alive:
            self.declare_dead(worker, "does not answer worker_status")
        return alive

    async def reconcile(self, worker: WorkerRecord) -> None:
        """Matches our sessions on `worker` with the ones it reports (AgentRL's Sync).

        Ours that it lacks have ended there: they finish with `task error`. Its that we lack,
        or have ended, are cancelled on the worker so that they stop holding its capacity.
        """
        if worker.syncing:   # one at a time; the one in flight goes again after
            worker.resync = True
            return
        worker.syncing = True
        try:
            while True:
                worker.resync = False
                await self._reconcile_once(worker)
                if not worker.resync:
                    return
        finally:
            worker.syncing = False

    async def _reconcile_once(self, worker: WorkerRecord) -> None:
        asked_at = time.monotonic()
        try:
            response = await self.http.call("GET", worker.address + "/get_sessions",
                                            timeout_s=self.config.probe_timeout_s * 5)
            if response.status != 200:
                raise ValueError(f"get_sessions answered {response.status}")
            reported = {int(sid) for sid in json.loads(response.body)}
        except (*TRANSPORT_ERRORS, TypeError) as error:
            log.info("reconciliation with %s failed: %r", worker.id, error)
            return
        for session_id in list(worker.sessions):
            session = self.sessions.get(session_id)
            if (session is not None and session_id not in reported and not session.busy
                    and session.created < asked_at):
                self.sessions.finish(session, SampleStatus.TASK_ERROR,
                                     metrics={"error": "the worker no longer has this session"})
        for session_id in reported:
            session = self.sessions.get(session_id)
            if session is None or session.worker is not worker or not session.running:
                self.spawn(self.cancel_on_worker(worker, session_id))
        worker.full_until_sync = False

    # ------------------------------------------------------------------ internals

    def _session(self, session_id: int) -> SessionRecord:
        session = self.sessions.get(session_id)
        if session is None:
            raise ControllerError(404, f"no session {session_id}")
        return session

    async def _guarded(self, session: SessionRecord, call: Coroutine[Any, Any, Reply]
                       ) -> Reply | None:
        """Awaits a worker call for `session`; None when the session ended meanwhile.

        The call runs as its own future stored on the session, so that `finish` (worker death,
        cancel) can abort it and the waiting request answers at once.
        """
        if not session.running:
            call.close()
            return None
        future = asyncio.ensure_future(call)
        session.call = future
        try:
            return await future
        except asyncio.CancelledError:
            if not future.cancelled():
                raise   # our own handler is being cancelled, not the worker call
            return None
        finally:
            session.call = None
            session.last_active = time.monotonic()

    def _lost_worker(self, session: SessionRecord, error: BaseException) -> None:
        self.sessions.finish(session, SampleStatus.TASK_ERROR,
                             metrics={"error": f"worker unreachable: {error!r}"})
        self.spawn(self.probe(session.worker))

    def _parse(self, session: SessionRecord, response: Reply, model):
        try:
            return model.model_validate_json(response.body)
        except ValidationError:
            self._end_on_worker_error(session, "malformed answer from the worker")
            return None

    def _end_on_worker_error(self, session: SessionRecord, reason: str) -> None:
        self.end_session(session, SampleStatus.TASK_ERROR, reason)

    async def cancel_on_worker(self, worker: WorkerRecord, session_id: int) -> None:
        """Cancels on the worker; its slot counts as used until the worker confirms."""
        if worker.state is WorkerState.DEAD:
            return
        worker.draining += 1
        try:
            body = WorkerSessionRequest(session_id=session_id).model_dump_json()
            # AgentRL's cancel returns once the episode has unwound: the call's own timeout.
            await self.http.call("POST", worker.address + "/cancel", body)
        except TRANSPORT_ERRORS as error:
            log.info("cancel of session %d on %s failed: %r", session_id, worker.id, error)
        finally:
            worker.draining -= 1


def _worker_detail(reply: Reply) -> Any:
    """A worker's error `detail` (JSON when it sent JSON), for the trainer."""
    try:
        return json.loads(reply.body)["detail"]
    except (ValueError, KeyError, TypeError):
        return reply.text[:1000]


def _status_json(reply: Reply) -> dict[str, Any] | None:
    """A sample_status answer: its JSON, None for "no such session", {} when unreadable."""
    if reply.status in (400, 404):
        return None
    try:
        parsed = json.loads(reply.body) if reply.status == 200 else {}
    except ValueError:
        return {}
    return parsed if isinstance(parsed, dict) else {}
