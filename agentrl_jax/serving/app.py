"""The OpenAI-compatible HTTP server over the sampling engine (FastAPI).

    POST /v1/chat/completions   chat, tools, n, stream, logprobs, trajectories (`agentrl` field)
    POST /v1/completions        raw text or token-id prompts
    POST /v1/responses          the Responses API, stateless, over the chat path
                                (`serving.responses_api`)
    GET  /v1/models             the served model names
    POST /v1/trajectories/{id}/reward   ends a trajectory (`TrajectoryStore.pop_finished`)
    GET  /health                liveness, without the API key

Guards, in the order a request meets them: the body-size limit (413, before the body is read
whole), the API key (401), the concurrency limit (429, requests generating at once, streamed
ones until their last chunk), then the request's own checks (`serving.service`). A client that
goes away while its request is generating (streamed or not) cancels it: the awaiting task is
cancelled, and `AsyncSamplingEngine.generate` passes that on as `SamplingEngine.cancel`, which
frees the request's decode slot and pages. A stream sends text as the engine samples it
(`_StreamedRun`; chunk shapes in `serving.responses`).
"""

from __future__ import annotations

import asyncio
import hmac
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from fastapi import FastAPI, Header, Request
from fastapi.responses import JSONResponse, StreamingResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from agentrl_jax.sampling.types import TokenEvent
from agentrl_jax.serving import errors, responses, responses_api, schemas
from agentrl_jax.serving.service import Outcome, Prepared, Service
from agentrl_jax.serving.trajectories import TrajectoryBusyError

TRAJECTORY_HEADER = "X-Trajectory-Id"


class BodyLimit:
    """ASGI middleware: 413 for a body over `limit` bytes, declared or streamed (chunked)."""

    def __init__(self, app: ASGIApp, limit: int):
        self.app, self.limit = app, limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        too_large = errors.APIError(413, f"the request body is larger than {self.limit} bytes",
                                    code="request_too_large")
        declared = dict(scope.get("headers") or []).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.limit:
            await too_large.response()(scope, receive, send)
            return
        # Read the body here, at most `limit` bytes of it, and hand it on whole.
        body, more = b"", True
        while more:
            message = await receive()
            if message["type"] != "http.request":
                break
            body += message.get("body", b"")
            more = message.get("more_body", False)
            if len(body) > self.limit:
                await too_large.response()(scope, receive, send)
                return
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)


class Counters:
    """Requests in flight and how requests ended, for the limit and for inspection."""

    def __init__(self) -> None:
        self.in_flight = 0
        self.served = 0
        self.disconnected = 0  # cancelled because the client went away


async def _until_disconnected(request: Request) -> None:
    while (await request.receive())["type"] != "http.disconnect":
        pass


async def _unless_disconnected(request: Request, work: Awaitable[Outcome],
                               counters: Counters) -> Outcome | None:
    """`work`'s outcome, or None (and `work` cancelled) if the client disconnects first."""
    task = asyncio.ensure_future(work)
    watch = asyncio.ensure_future(_until_disconnected(request))
    try:
        await asyncio.wait({task, watch}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        watch.cancel()
        if not task.done():
            task.cancel()
            counters.disconnected += 1
            await asyncio.gather(task, return_exceptions=True)
    return task.result() if not task.cancelled() else None


class _StreamedRun:
    """A streamed request's sampling: `Service.run` as a task, whose token events, its end and
    the client's disconnection all arrive in one queue, so that the stream sends each host
    sync's tokens as soon as the engine reports them.

    The run is cancelled (the engine frees the slot and pages) when the client disconnects,
    seen here or by Starlette (which then cancels the body's generator), and in any case when
    the response ends with the run still going (`stop`, which the response always calls).
    """

    def __init__(self, service: Service, prepared: Prepared, request: Request,
                 counters: Counters):
        self.service, self.prepared, self.request, self.counters = (
            service, prepared, request, counters)
        self.inbox: asyncio.Queue[tuple[int, TokenEvent] | None] = asyncio.Queue()
        self.task: asyncio.Future[Outcome] | None = None
        self.watch: asyncio.Future[None] | None = None

    def _wake(self, _: Any) -> None:
        self.inbox.put_nowait(None)

    async def events(self) -> AsyncIterator[list[tuple[int, TokenEvent]]]:
        """Starts the run; yields (choice, event) lists, all those queued at the time, until
        the run ends or the client goes away (events queued before the run's end come before
        it: `AsyncSamplingEngine.generate` delivers them first)."""
        self.task = asyncio.ensure_future(self.service.run(
            self.prepared, lambda i, event: self.inbox.put_nowait((i, event))))
        self.task.add_done_callback(self._wake)
        self.watch = asyncio.ensure_future(_until_disconnected(self.request))
        self.watch.add_done_callback(self._wake)
        done = False
        while not done:
            batch, item = [], await self.inbox.get()
            while True:
                if item is None:
                    done = True
                    break
                batch.append(item)
                if self.inbox.empty():
                    break
                item = self.inbox.get_nowait()
            if batch:
                yield batch

    async def outcome(self) -> Outcome | None:
        """The run's outcome, or None (the run cancelled) if the client went away first."""
        assert self.task is not None, "events() starts the run"
        if not self.task.done():
            self.stop()
            await asyncio.gather(self.task, return_exceptions=True)
            return None
        self.stop()
        return self.task.result()

    def stop(self) -> None:
        """Cancels the run if it is still going (its client is gone) and the watch."""
        if self.watch is not None:
            self.watch.cancel()
        if self.task is not None and not self.task.done():
            self.task.cancel()
            self.counters.disconnected += 1


class _ClosingStream(StreamingResponse):
    """A StreamingResponse that calls `on_end` however it ends: also when the client is gone
    before the first chunk, when Starlette never starts the body's generator (whose own
    `finally` then never runs)."""

    def __init__(self, on_end: Callable[[], None], *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self._on_end = on_end

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self._on_end()


def create_app(service: Service) -> FastAPI:
    """The server of `service`; `app.state.service` and `app.state.counters` for its owner."""
    config = service.config
    app = FastAPI(title="agentrl_jax OpenAI-compatible server", docs_url=None, redoc_url=None)
    errors.install_handlers(app)
    counters = Counters()
    app.state.service, app.state.counters = service, counters
    created = int(time.time())

    @app.middleware("http")
    async def authenticate(request: Request, call_next: Callable[[Request], Any]) -> Any:
        if config.api_key and request.url.path != "/health":
            given = request.headers.get("authorization", "")
            scheme, _, key = given.partition(" ")
            if scheme.lower() != "bearer" or not hmac.compare_digest(
                    key.strip().encode(), config.api_key.encode()):
                return errors.APIError(401, "Incorrect API key provided.",
                                       type=errors.AUTHENTICATION,
                                       code="invalid_api_key").response()
        return await call_next(request)

    app.add_middleware(BodyLimit, limit=config.max_body_bytes)

    def admit() -> None:
        if counters.in_flight >= config.max_concurrent:
            raise errors.APIError(429, f"more than {config.max_concurrent} requests at once; "
                                  "retry later", type=errors.RATE_LIMIT,
                                  code="rate_limit_exceeded")
        counters.in_flight += 1

    async def respond(request: Request, prepared: Prepared, stream: Any,
                      render: Callable[[Outcome], dict[str, Any]]) -> Any:
        try:
            admit()
        except errors.APIError:
            service.release(prepared)
            raise
        if stream is None:
            try:
                outcome = await _unless_disconnected(request, service.run(prepared), counters)
            finally:
                counters.in_flight -= 1
            counters.served += 1
            return JSONResponse(render(outcome)) if outcome is not None else None

        run = _StreamedRun(service, prepared, request, counters)

        async def chunks() -> AsyncIterator[str]:
            try:
                yield stream.opening(len(prepared.params))
                streamed = [responses.StreamedChoice(service, params, prepared.parse)
                            for params in prepared.params]
                async for events in run.events():
                    for index, event in events:
                        streamed[index].add(event)
                    text = "".join(stream.progress(service, i, streamed[i])
                                   for i in sorted({i for i, _ in events}))
                    if text:
                        yield text
                try:
                    outcome = await run.outcome()
                except errors.APIError as e:  # after the headers: an error event, as OpenAI
                    yield responses.sse(e.body())
                    return
                if outcome is None:
                    return
                counters.served += 1
                for chunk in stream.ending(service, outcome, streamed):
                    yield chunk
            finally:
                ended()

        def ended() -> None:
            if not closed:
                closed.append(True)
                run.stop()
                counters.in_flight -= 1
                service.release(prepared)  # a stream that ended before it sampled

        closed: list[bool] = []
        return _ClosingStream(ended, chunks(), media_type="text/event-stream",
                              headers={"Cache-Control": "no-cache"})

    def trajectory_of(model: str, body: str | None, header: str | None) -> str | None:
        """The request's trajectory id (body or header), once its model is known to be served
        (404 before anything else)."""
        if body and header and body != header:
            raise errors.bad_request(f"the {TRAJECTORY_HEADER} header and trajectory_id differ",
                                     param="trajectory_id")
        service.policy_for(model)
        return body or header

    @app.post("/v1/chat/completions")
    async def chat_completions(
        body: schemas.ChatCompletionRequest, request: Request,
        x_trajectory_id: str | None = Header(None, alias=TRAJECTORY_HEADER),
    ) -> Any:
        trajectory = trajectory_of(body.model, body.trajectory_id, x_trajectory_id)
        stream = (responses.ChatStream(body.model, bool(body.logprobs), body.include_usage())
                  if body.stream else None)
        return await respond(
            request, service.prepare_chat(body, trajectory), stream,
            lambda o: responses.chat_completion(service, o, body.model, bool(body.logprobs)))

    @app.post("/v1/responses")
    async def create_response(
        body: schemas.ResponsesRequest, request: Request,
        x_trajectory_id: str | None = Header(None, alias=TRAJECTORY_HEADER),
    ) -> Any:
        trajectory = trajectory_of(body.model, body.trajectory_id, x_trajectory_id)
        chat = responses_api.chat_request(body)
        stream = responses_api.ResponseStream(body) if body.stream else None
        return await respond(request, service.prepare_chat(chat, trajectory), stream,
                             lambda o: responses_api.response(service, o, body))

    @app.post("/v1/completions")
    async def completions(body: schemas.CompletionRequest, request: Request) -> Any:
        service.policy_for(body.model)
        stream = responses.CompletionStream(body.model, body.include_usage()) if body.stream \
            else None
        return await respond(
            request, service.prepare_completion(body), stream,
            lambda o: responses.completion(service, o, body.model, body.logprobs is not None))

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        versions = await service.engine.policies()
        return {"object": "list", "data": [
            {"id": name, "object": "model", "created": created, "owned_by": "agentrl_jax",
             responses.EXTENSION: {"policy": policy, "weight_version": versions.get(policy)}}
            for name, policy in config.models.items()]}

    @app.post("/v1/trajectories/{trajectory_id}/reward")
    async def reward(trajectory_id: str, body: schemas.RewardRequest) -> dict[str, Any]:
        store = service.trajectories
        if body.group_size is not None and not 0 <= body.member < body.group_size:
            raise errors.bad_request(f"member {body.member} is not in a group of "
                                     f"{body.group_size}", param="member")
        trajectory = store.get(trajectory_id)
        try:
            rollouts = store.finish(trajectory_id, body.reward, body.status, task=body.task,
                                    group_id=body.group_id, member=body.member,
                                    group_size=body.group_size, metrics=body.metrics)
        except KeyError:
            raise errors.APIError(404, f"no open trajectory {trajectory_id!r}",
                                  type=errors.NOT_FOUND, param="trajectory_id",
                                  code="trajectory_not_found") from None
        except TrajectoryBusyError as e:
            raise errors.APIError(409, str(e), type=errors.CONFLICT,
                                  code="trajectory_busy") from None
        assert trajectory is not None  # finish() found it
        for session in store.session_ids(trajectory):
            await service.engine.end_session(session)
        return {"trajectory_id": trajectory_id, "segments": len(rollouts),
                "edits": trajectory.edits,
                "num_turns": sum(r.num_turns for r in rollouts),
                "num_tokens": sum(len(r.tokens) for r in rollouts),
                "num_sampled_tokens": sum(r.num_loss_tokens for r in rollouts)}

    @app.get("/health")
    async def health() -> dict[str, Any]:
        return {"status": "ok", "in_flight": counters.in_flight}

    return app
