"""The trainer's async client of a controller (ours or AgentRL's), with typed results.

    async with ControllerClient("http://127.0.0.1:5020/api") as client:
        sample = await client.start_sample("echo", 3)
        step = await client.interact(sample.session_id, [assistant_message])

`start_sample` waits a random 0..`start_jitter_s` seconds before each attempt (as AgentRL's
trainer does, so a thousand episodes starting at once do not arrive at once) and retries when
the fleet is full or unreachable. `interact` is never retried: it is not idempotent.
"""

from __future__ import annotations

import asyncio
import dataclasses
import random
from typing import Any

import httpx

from agentrl_jax import stage_clock
from agentrl_jax.controller.wire import (
    SESSION_ID_HEADER,
    InteractResponse,
    Message,
    SampleIndex,
    SampleStatus,
    StartSampleResponse,
)

_RETRYABLE = {406, 502, 503, 504}


class ControllerRequestError(Exception):
    def __init__(self, status_code: int, detail: str) -> None:
        super().__init__(f"controller answered {status_code}: {detail}")
        self.status_code = status_code
        self.detail = detail


@dataclasses.dataclass(frozen=True)
class StartedSample:
    session_id: int
    messages: list[Message]
    tools: list[dict[str, Any]] | None
    finish: bool
    status: SampleStatus
    reward: float
    metrics: dict[str, Any]


@dataclasses.dataclass(frozen=True)
class StepResult:
    finish: bool
    reward: float
    status: SampleStatus
    messages: list[Message]
    metrics: dict[str, Any]


class ControllerClient:
    def __init__(self, base_url: str, *, timeout_s: float = 600.0, start_retries: int = 5,
                 start_jitter_s: float = 3.0, retry_backoff_s: float = 1.0,
                 max_connections: int = 1024, seed: int | None = None,
                 transport: httpx.AsyncBaseTransport | None = None) -> None:
        base_url = base_url.rstrip("/")
        self.base_url = base_url if base_url.endswith("/api") else base_url + "/api"
        self.start_retries = start_retries
        self.start_jitter_s = start_jitter_s
        self.retry_backoff_s = retry_backoff_s
        self._rng = random.Random(seed)
        self._http = httpx.AsyncClient(
            base_url=self.base_url, timeout=timeout_s, transport=transport,
            limits=httpx.Limits(max_connections=max_connections,
                                max_keepalive_connections=max_connections))

    async def __aenter__(self) -> ControllerClient:
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    # ------------------------------------------------------------------ episodes

    async def start_sample(self, name: str, index: SampleIndex,
                           custom_task: dict[str, Any] | None = None) -> StartedSample:
        body = {"name": name, "index": index, "custom_task": custom_task}
        for attempt in range(self.start_retries + 1):
            if self.start_jitter_s > 0:
                with stage_clock.span("start_jitter"):
                    await asyncio.sleep(self._rng.uniform(0, self.start_jitter_s))
            last_attempt = attempt == self.start_retries
            try:
                with stage_clock.span("env_wait"):
                    response = await self._http.post("/start_sample", json=body)
            except httpx.TransportError:
                if last_attempt:
                    raise
            else:
                if response.status_code == 200:
                    parsed = StartSampleResponse.model_validate_json(response.content)
                    return StartedSample(
                        session_id=int(response.headers[SESSION_ID_HEADER]),
                        messages=parsed.messages, tools=parsed.tools, finish=parsed.finish,
                        status=SampleStatus.parse(parsed.status), reward=parsed.reward,
                        metrics=parsed.metrics)
                if response.status_code not in _RETRYABLE or last_attempt:
                    raise ControllerRequestError(response.status_code, response.text)
            await asyncio.sleep(self.retry_backoff_s * (attempt + 1))
        raise AssertionError("unreachable")

    async def interact(self, session_id: int, messages: list[Message]) -> StepResult:
        with stage_clock.span("env_wait"):
            response = await self._http.post("/interact", json={"messages": messages},
                                             headers={SESSION_ID_HEADER: str(session_id)})
        self._check(response)
        parsed = InteractResponse.model_validate_json(response.content)
        return StepResult(finish=parsed.finish, reward=parsed.reward,
                          status=SampleStatus.parse(parsed.status), messages=parsed.messages,
                          metrics=parsed.metrics)

    async def cancel(self, session_id: int) -> None:
        with stage_clock.span("env_wait"):
            response = await self._http.post("/cancel",
                                             headers={SESSION_ID_HEADER: str(session_id)})
        self._check(response)

    # ------------------------------------------------------------------ fleet

    async def get_indices(self, name: str) -> list[SampleIndex]:
        return self._json(await self._http.get("/get_indices", params={"name": name}))

    async def cancel_all(self, name: str | None = None, force: bool = False) -> dict[str, Any]:
        params: dict[str, Any] = {"force": "true"} if force else {}
        if name is not None:
            params["name"] = name
        return self._json(await self._http.post("/cancel_all", params=params))

    async def list_workers(self) -> dict[str, list[dict[str, Any]]]:
        return self._json(await self._http.get("/list_workers"))

    async def list_sessions(self) -> list[dict[str, Any]]:
        return self._json(await self._http.get("/list_sessions"))

    async def mark_stale(self, name: str, worker_id: str, stale: bool = True) -> dict[str, Any]:
        return self._json(await self._http.post(
            "/mark_stale", json={"name": name, "worker_id": worker_id, "stale": stale}))

    async def version(self) -> dict[str, Any]:
        return self._json(await self._http.get("/version"))

    # ------------------------------------------------------------------ internals

    @staticmethod
    def _check(response: httpx.Response) -> None:
        if response.status_code != 200:
            raise ControllerRequestError(response.status_code, response.text)

    def _json(self, response: httpx.Response) -> Any:
        self._check(response)
        return response.json()
