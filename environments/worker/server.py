"""The task worker's HTTP API (AgentRL task-worker protocol, prefix `/api`) over an EpisodeTable.

Endpoints and codes follow `agentrl-worker` 0.4.0 so either controller can drive either worker:
406 when full, 400 for an unknown session or a second concurrent call on one session.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import uuid
from collections.abc import AsyncIterator

import httpx
from fastapi import APIRouter, FastAPI
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse

from agentrl_jax.controller.wire import (
    CancelNotice,
    HeartbeatRequest,
    WorkerInteractRequest,
    WorkerInteractResponse,
    WorkerSessionRequest,
    WorkerStartSampleRequest,
    json_response,
    parse_model,
    read_model,
)
from environments.worker.agent_input import session_of_unreadable_turn
from environments.worker.episodes import (
    EpisodeTable,
    SessionBusy,
    SessionExists,
    SessionUnknown,
    WorkerFull,
)
from environments.worker.heartbeat import heartbeat_loop
from environments.worker.task import Task

log = logging.getLogger(__name__)


@dataclasses.dataclass
class WorkerConfig:
    controller_api: str | None = None     # e.g. http://127.0.0.1:5020/api; None: no heartbeats
    self_api: str | None = None           # how the controller reaches this worker's /api
    concurrency: int | None = None        # overrides Task.concurrency
    heartbeat_interval_s: float = 8.0     # AgentRL's heart rate
    call_timeout_s: float | None = 240.0  # one start_sample/interact (AgentRL: 4 min)
    idle_timeout_s: float | None = 660.0  # a session the agent abandoned (after the controller's)
    sweep_interval_s: float = 20.0        # how often idle sessions are looked for
    cancel_grace_s: float = 1.0           # how long cancel waits for the episode to unwind


def create_worker_app(task: Task, config: WorkerConfig | None = None) -> FastAPI:
    config = config or WorkerConfig()
    table = EpisodeTable(task, concurrency=config.concurrency,
                         call_timeout_s=config.call_timeout_s,
                         idle_timeout_s=config.idle_timeout_s,
                         cancel_grace_s=config.cancel_grace_s)
    worker_id = uuid.uuid4().hex   # new per process: tells the controller we restarted
    indices = task.indices()
    background: set[asyncio.Task[None]] = set()

    def beat() -> HeartbeatRequest:
        return HeartbeatRequest(name=task.name, address=config.self_api or "",
                                concurrency=table.concurrency, indices=indices,
                                worker_id=worker_id, current=table.current)

    async def sweep_idle() -> None:
        while True:
            await asyncio.sleep(config.sweep_interval_s)
            if expired := await table.expire_idle():
                log.info("expired %d idle sessions", expired)

    async def notify_cancelled(session_id: int) -> None:
        if not config.controller_api:
            return
        with contextlib.suppress(httpx.HTTPError, OSError):
            async with httpx.AsyncClient(timeout=5.0) as client:
                await client.post(config.controller_api.rstrip("/") + "/cancel_notice",
                                  content=CancelNotice(session_id=session_id).model_dump_json(),
                                  headers={"session_id": str(session_id),
                                           "content-type": "application/json"})

    def in_background(coroutine) -> None:
        job = asyncio.create_task(coroutine)
        background.add(job)
        job.add_done_callback(background.discard)

    @contextlib.asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        in_background(sweep_idle())
        if config.controller_api and config.self_api:
            in_background(heartbeat_loop(config.controller_api, beat,
                                         config.heartbeat_interval_s))
        try:
            yield
        finally:
            for job in list(background):
                job.cancel()
            await table.cancel_all()
            await task.close()

    api = APIRouter()

    @api.post("/start_sample")
    async def start_sample(request: Request):
        body = await read_model(request, WorkerStartSampleRequest)
        try:
            output = await table.start(body.session_id, body.index, body.custom_task)
        except WorkerFull:
            raise HTTPException(406, f"concurrency limit reached: {table.concurrency}") from None
        except SessionExists:
            raise HTTPException(400, "session id already exists") from None
        return json_response(output, headers={"session_id": str(body.session_id)})

    async def reject_unreadable(raw: bytes, error: HTTPException) -> WorkerInteractResponse:
        """A turn the wire parser refused ends its session as the agent's failure (or 422)."""
        session_id = session_of_unreadable_turn(raw)
        if session_id is None:
            raise error
        try:
            output = await table.reject(session_id, f"the turn could not be read: "
                                                    f"{str(error.detail)[:300]}")
        except (SessionUnknown, SessionBusy):
            raise error from None
        return WorkerInteractResponse(session_id=session_id, env_out=output)

    @api.post("/interact")
    async def interact(request: Request):
        raw = await request.body()
        try:
            body = parse_model(raw, WorkerInteractRequest)
        except HTTPException as error:
            return json_response(await reject_unreadable(raw, error))
        try:
            output = await table.interact(body.session_id, body.messages)
        except SessionUnknown:
            raise HTTPException(400, "no such session") from None
        except SessionBusy:
            raise HTTPException(400, "a call on this session is in flight") from None
        return json_response(WorkerInteractResponse(session_id=body.session_id, env_out=output))

    async def cancel_one(request: Request, with_notice: bool) -> dict:
        body = await read_model(request, WorkerSessionRequest)
        try:
            await table.cancel(body.session_id)
        except SessionUnknown:
            raise HTTPException(400, "no such session") from None
        if with_notice:
            in_background(notify_cancelled(body.session_id))
        return {"session_id": body.session_id}

    @api.post("/cancel")
    async def cancel(request: Request):
        return await cancel_one(request, with_notice=False)

    @api.post("/cancel_with_notice")
    async def cancel_with_notice(request: Request):
        return await cancel_one(request, with_notice=True)

    @api.post("/cancel_all")
    async def cancel_all():
        await table.cancel_all()
        return {}

    @api.post("/cancel_all_with_notice")
    async def cancel_all_with_notice():
        sessions = list(table.sessions())
        await table.cancel_all()
        for session_id in sessions:
            in_background(notify_cancelled(session_id))
        return {}

    @api.get("/get_sessions")
    async def get_sessions():
        return JSONResponse({str(sid): index for sid, index in table.sessions().items()})

    @api.get("/worker_status")
    async def worker_status():
        return {"concurrency": table.concurrency, "current": table.current,
                "orphaned": len(table.orphans), "worker_id": worker_id}

    @api.post("/sample_status")
    async def sample_status(request: Request):
        body = await read_model(request, WorkerSessionRequest)
        try:
            return table.status_of(body.session_id)
        except SessionUnknown:
            raise HTTPException(400, "no such session") from None

    @api.get("/get_indices")
    async def get_indices():
        return indices

    app = FastAPI(title=f"task worker: {task.name}", lifespan=lifespan)
    app.include_router(api, prefix="/api")
    app.state.table = table
    app.state.worker_id = worker_id
    return app
