"""The controller's HTTP API (AgentRL's, prefix `/api`) over a `Controller`.

`start_sample` and `interact` carry nearly all the traffic and are served by `HotRoutes`, a
plain ASGI layer in front of FastAPI: FastAPI's middleware stack, router and per-request exit
stacks cost more CPU than the proxying itself (py-spy, benchmarks/controller.py). The other
endpoints are ordinary FastAPI routes.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import AsyncIterator

from fastapi import APIRouter, FastAPI, Query
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse

from agentrl_jax.controller import maintenance
from agentrl_jax.controller.config import ControllerConfig
from agentrl_jax.controller.service import Controller, ControllerError
from agentrl_jax.controller.wire import (
    SESSION_ID_HEADER,
    CancelNotice,
    HeartbeatRequest,
    InteractRequest,
    MarkStaleRequest,
    StartSampleRequest,
    parse_model,
    read_model,
    session_id_header,
)


def create_controller_app(config: ControllerConfig | None = None) -> HotRoutes:
    controller = Controller(config)

    @contextlib.asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        jobs = maintenance.start_background_jobs(controller)
        try:
            yield
        finally:
            for job in jobs:
                job.cancel()
            await controller.close()

    api = APIRouter()

    @api.get("/get_indices")
    async def get_indices(name: str = Query(...)):
        return controller.get_indices(name)

    @api.post("/cancel")
    async def cancel(request: Request):
        return controller.cancel(session_id_header(request))

    @api.post("/cancel_all")
    async def cancel_all(name: str | None = None, force: bool = False):
        return await controller.cancel_all(name, force)

    @api.post("/cancel_notice")
    async def cancel_notice(request: Request):
        # A worker's "I have cancelled this session" (its cancel_with_notice): the id is in
        # the body (AgentRL's worker also sends the header).
        body = await request.body()
        if body.strip():
            return controller.cancel_notice(parse_model(body, CancelNotice).session_id)
        return controller.cancel_notice(session_id_header(request))

    @api.get("/list_workers")
    async def list_workers():
        now = time.monotonic()
        return {name: [w.describe(now) for w in task.workers.values()]
                for name, task in controller.fleet.tasks.items()}

    @api.get("/list_sessions")
    async def list_sessions(name: str | None = None):
        now = time.monotonic()
        return [s.describe(now) for s in controller.sessions if name in (None, s.name)]

    @api.post("/mark_stale")
    async def mark_stale(request: Request):
        body = await read_model(request, MarkStaleRequest)
        return controller.mark_stale(body.name, body.worker_id, body.stale)

    @api.post("/receive_heartbeat")
    async def receive_heartbeat(request: Request):
        return controller.receive_heartbeat(await read_model(request, HeartbeatRequest))

    @api.post("/sync_all")
    async def sync_all():
        await maintenance.reconcile_all(controller)
        return {}

    @api.post("/clean_session")
    async def clean_session():
        maintenance.clean(controller)
        return controller.sessions.counts()

    @api.get("/version")
    async def version():
        return {"variant": controller.config.variant, "version": controller.config.version,
                "implementation": "agentrl_jax"}

    app = FastAPI(title="agentrl_jax controller", lifespan=lifespan)
    app.include_router(api, prefix="/api")

    @app.exception_handler(ControllerError)
    async def controller_error(_: Request, error: ControllerError) -> JSONResponse:
        return JSONResponse({"detail": error.detail}, status_code=error.status_code)

    app.state.controller = controller
    return HotRoutes(app, controller)


class HotRoutes:
    """Serves POST /api/start_sample and /api/interact directly; passes the rest to `app`.

    Every request body, on any route, is read here first and refused with 413 past
    `max_body_bytes`, so that no handler ever holds an unbounded body.
    """

    def __init__(self, app: FastAPI, controller: Controller) -> None:
        self.app = app
        self.state = app.state   # so that callers can reach the controller as with FastAPI
        self.controller = controller
        self.max_body_bytes = controller.config.max_body_bytes
        self._routes = {"/api/start_sample": self._start_sample, "/api/interact": self._interact}

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        try:
            body = await _read_body(scope, receive, self.max_body_bytes)
        except ControllerError as error:
            return await _respond(send, error.status_code, _detail(error.detail), [])
        handler = self._routes.get(scope.get("path"))
        if handler is None or scope["method"] != "POST":
            return await self.app(scope, _replay(body, receive), send)
        try:
            status, payload, headers = await handler(scope, body)
        except (ControllerError, HTTPException) as error:
            status, payload, headers = error.status_code, _detail(error.detail), []
        await _respond(send, status, payload, headers)

    async def _start_sample(self, scope, body: bytes):
        request = parse_model(body, StartSampleRequest)
        session_id, response = await self.controller.start_sample(request)
        return 200, response.model_dump_json().encode(), [(b"session_id",
                                                           str(session_id).encode())]

    async def _interact(self, scope, body: bytes):
        raw = next((v for k, v in scope["headers"] if k == b"session_id"), None)
        try:
            session_id = int(raw)   # type: ignore[arg-type]
        except (TypeError, ValueError):
            raise ControllerError(400, f"header {SESSION_ID_HEADER} must be an integer") \
                from None
        request = parse_model(body, InteractRequest)
        response = await self.controller.interact(session_id, request.messages)
        return 200, response.model_dump_json().encode(), []


async def _read_body(scope, receive, limit: int) -> bytes:
    """The whole request body; a ControllerError 413 past `limit` bytes (declared or sent)."""
    too_large = ControllerError(413, f"request body over {limit} bytes")
    for name, value in scope["headers"]:
        if name == b"content-length" and value.isdigit() and int(value) > limit:
            raise too_large
    chunks, size = [], 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            break
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise too_large
        chunks.append(chunk)
        if not message.get("more_body"):
            break
    return b"".join(chunks)


def _replay(body: bytes, receive):
    """A `receive` that yields the body already read, then defers to the real one."""
    pending = True

    async def replay():
        nonlocal pending
        if pending:
            pending = False
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay


async def _respond(send, status: int, body: bytes, headers: list) -> None:
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"),
                            (b"content-length", str(len(body)).encode()), *headers]})
    await send({"type": "http.response.body", "body": body})


def _detail(detail: object) -> bytes:
    return json.dumps({"detail": detail}).encode()
