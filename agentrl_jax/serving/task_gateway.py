"""The controller's API for agents being trained: the environment's reward, never the agent's.

An agent trained through the OpenAI server (`serving.app`) plays its task through this gateway,
which stands in front of the real controller and speaks its routes (AgentRL's wire,
`controller/wire.py`): `POST /api/start_sample`, `/api/interact` and `/api/cancel`. An agent
written against a controller runs unchanged against it. The trainer gives each episode to the
agent as a `Job`: the draw (task, index), its GRPO group and member, and the trajectory id its
requests to the server carry.

The agent's output is untrusted, so the gateway checks each step rather than believe it:

  the draw      start_sample must carry the job's trajectory id (header `X-Trajectory-Id`) and
                name the job's task and index; a job is started once.
  the actions   interact must send the turn the policy sampled last on that trajectory, once;
                the controller receives the server's record of the turn (the parsed tool calls
                with their ids), never text of the agent's own.
  the episode   when it ends, the trajectory's last stream must be the environment's episode:
                exactly its messages and tools and the forwarded turns, and no turn may have
                been sampled that the environment did not receive (best-of-n; but the last
                turn of an episode the agent stops). Otherwise it ends `agent validation
                failed` with reward 0 (penalised in training).
  the reward    the environment's (its grader, through the controller), given with the job's
                group to `TrajectoryStore.finish`; the server's own reward route is closed to
                the agents (`without_caller_rewards`).

How a job ends:

  the environment ends the episode           its reward and status
  the agent cancels, exits or is stopped     `running` (truncated: penalised), reward 0
    after start_sample
  the agent never starts its episode         `task error` (masked): it saw nothing, so it hid
                                             nothing
  the controller fails                       `task error` (masked), as in the agent loop

`pop_finished` returns the ended jobs' rollouts (`serving.groups.ServedGroups.feed_from` takes
it); each carries the draw's index in `metrics["index"]`. Everything runs in the server's event
loop (the store is not thread-safe), which `serving.agent_rollouts` shares with the pipeline.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
from typing import Any

import httpx
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from starlette.types import ASGIApp, Receive, Scope, Send

from agentrl_jax.controller.client import ControllerClient, ControllerRequestError
from agentrl_jax.controller.wire import (
    SESSION_ID_HEADER,
    InteractRequest,
    InteractResponse,
    Message,
    StartSampleRequest,
    StartSampleResponse,
    json_response,
    read_model,
    session_id_header,
)
from agentrl_jax.episode import SampleIndex, SampleStatus
from agentrl_jax.rollout.record import Rollout
from agentrl_jax.serving import errors
from agentrl_jax.serving.app import TRAJECTORY_HEADER
from agentrl_jax.serving.service import Service
from agentrl_jax.serving.trajectories import Trajectory, comparable, first_difference

log = logging.getLogger(__name__)


@dataclasses.dataclass
class Job:
    """One episode the trainer gives an agent, and what the gateway has seen of it."""

    task: str  # the controller's task name
    index: SampleIndex
    group_id: int  # the GRPO group (`serving.groups`), unique among open groups
    member: int
    group_size: int
    trajectory_id: str  # what the agent's requests to the server carry
    session_id: int | None = None  # the controller's, once started
    starting: bool = False
    in_flight: bool = False  # an interact is being forwarded
    tools: list[dict[str, Any]] | None = None
    # The environment's messages and the turns it received, in order.
    transcript: list[Message] = dataclasses.field(default_factory=list)
    forwarded: int = 0  # turns sent to the environment
    ended: bool = False
    status: SampleStatus | None = None  # how it ended, once it has
    reward: float = 0.0


class GatewayError(Exception):
    """A refusal, answered as the controller answers (`{"detail": ...}`)."""

    def __init__(self, status_code: int, detail: str):
        super().__init__(detail)
        self.status_code, self.detail = status_code, detail


class TaskGateway:
    """Jobs by trajectory id and by controller session, and the routes agents call."""

    def __init__(self, controller: ControllerClient, service: Service):
        """`controller`: the real controller; `service`: the server whose trajectories (and
        engine sessions) the jobs' episodes are."""
        self.controller, self.service = controller, service
        self._jobs: dict[str, Job] = {}
        self._by_session: dict[int, Job] = {}
        self._finished: list[Rollout] = []  # jobs without a trajectory in the store
        self.ended: list[Job] = []  # every job ended, in order (for logs and tests)

    # ---- the trainer's side ----------------------------------------------------------------

    def add_job(self, job: Job) -> None:
        if job.trajectory_id in self._jobs:
            raise ValueError(f"a job of trajectory {job.trajectory_id!r} is open")
        self._jobs[job.trajectory_id] = job

    async def end_job(self, trajectory_id: str, why: str) -> None:
        """Ends a job whose agent is done with it (exited, stopped, timed out), unless the
        episode already ended: a started one as truncated, its controller session cancelled;
        an unstarted one masked."""
        job = self._jobs.get(trajectory_id)
        if job is None or job.ended:
            return
        if job.session_id is None:
            await self._finish(job, 0.0, SampleStatus.TASK_ERROR, {}, error=why)
            return
        await self._cancel_session(job)
        await self._finish(job, 0.0, SampleStatus.RUNNING, {"ended_by": why})

    def pop_finished(self) -> list[Rollout]:
        """The rollouts of the jobs ended since the last call (one per trajectory segment), for
        `ServedGroups.feed_from`."""
        out = self.service.trajectories.pop_finished() + self._finished
        self._finished = []
        return out

    @property
    def num_open(self) -> int:
        return len(self._jobs)

    # ---- the agent's side: the controller's routes -------------------------------------------

    def app(self) -> FastAPI:
        """The routes, to mount under the server's app (behind its API key and body limit)."""
        api = FastAPI(title="agentrl_jax task gateway", docs_url=None, redoc_url=None)

        @api.exception_handler(GatewayError)
        async def refused(_: Request, error: GatewayError) -> JSONResponse:
            return JSONResponse({"detail": error.detail}, status_code=error.status_code)

        @api.post("/api/start_sample")
        async def start_sample(request: Request) -> Response:
            body = await read_model(request, StartSampleRequest)
            session_id, started = await self.start(request.headers.get(TRAJECTORY_HEADER), body)
            return json_response(started, headers={SESSION_ID_HEADER: str(session_id)})

        @api.post("/api/interact")
        async def interact(request: Request) -> Response:
            body = await read_model(request, InteractRequest)
            return json_response(await self.interact(session_id_header(request),
                                                     body.messages))

        @api.post("/api/cancel")
        async def cancel(request: Request) -> dict[str, Any]:
            await self.cancel(session_id_header(request))
            return {}

        return api

    async def start(self, trajectory_id: str | None, body: StartSampleRequest
                    ) -> tuple[int, StartSampleResponse]:
        job = self._jobs.get(trajectory_id or "")
        if job is None:
            raise GatewayError(403, f"no job for trajectory {trajectory_id!r}: send the job's "
                                    f"trajectory id in the {TRAJECTORY_HEADER} header")
        if job.starting or job.session_id is not None or job.ended:
            raise GatewayError(409, "this job's episode was already started")
        if (body.name, body.index) != (job.task, job.index):
            raise GatewayError(403, f"this job plays {job.task} index {job.index!r}")
        job.starting = True
        try:
            started = await self.controller.start_sample(job.task, job.index)
        except (ControllerRequestError, httpx.HTTPError) as e:
            await self._finish(job, 0.0, SampleStatus.TASK_ERROR, {}, error=repr(e))
            raise _passed_on(e) from e
        job.session_id, job.tools = started.session_id, started.tools
        job.transcript = [dict(m) for m in started.messages]
        self._by_session[started.session_id] = job
        if started.finish:
            await self._finish(job, started.reward, started.status, started.metrics)
        return started.session_id, StartSampleResponse(
            messages=started.messages, tools=started.tools, finish=started.finish,
            status=str(started.status), reward=started.reward, metrics=started.metrics)

    async def interact(self, session_id: int, messages: list[Message]) -> InteractResponse:
        job = self._session_job(session_id)
        if job.in_flight:
            raise GatewayError(409, "an interact of this session is in flight")
        turn = self._sampled_turn(job, messages)
        job.in_flight = True
        try:
            try:
                step = await self.controller.interact(session_id, [turn])
            except (ControllerRequestError, httpx.HTTPError) as e:
                await self._finish(job, 0.0, SampleStatus.TASK_ERROR, {}, error=repr(e))
                raise _passed_on(e) from e
            job.forwarded += 1
            job.transcript.append(turn)
            if step.finish:
                await self._finish(job, step.reward, step.status, step.metrics)
            else:
                job.transcript += [dict(m) for m in step.messages]
        finally:
            job.in_flight = False
        return InteractResponse(finish=step.finish, reward=step.reward, status=str(step.status),
                                messages=step.messages, metrics=step.metrics)

    async def cancel(self, session_id: int) -> None:
        job = self._session_job(session_id)
        if job.in_flight:
            raise GatewayError(409, "an interact of this session is in flight")
        await self._cancel_session(job)
        await self._finish(job, 0.0, SampleStatus.RUNNING, {"ended_by": "agent cancelled"})

    # ---- checks ------------------------------------------------------------------------------

    def _session_job(self, session_id: int) -> Job:
        job = self._by_session.get(session_id)
        if job is None or job.ended:
            raise GatewayError(404, f"no running session {session_id} of this gateway")
        return job

    def _sampled_turn(self, job: Job, messages: list[Message]) -> Message:
        """The server's record of the turn the agent sends, if it is the policy's last sampled
        turn of the job's trajectory, not yet forwarded; else a refusal."""
        trajectory = self.service.trajectories.get(job.trajectory_id)
        if trajectory is None or trajectory.busy or not trajectory.segments:
            raise GatewayError(409, "no sampled turn to send: sample it from the server with "
                                    "this job's trajectory id first")
        if _sampled_turns(trajectory) != job.forwarded + 1:
            raise GatewayError(409, "send each turn the policy samples, once, in order")
        last = trajectory.current.client_messages[-1]
        if len(messages) != 1 or comparable(messages[0]) != comparable(last):
            raise GatewayError(409, "the turn sent is not the turn the policy sampled")
        return dict(last)

    def _unfaithful(self, job: Job, trajectory: Trajectory, truncated: bool) -> str | None:
        """Why the trajectory is not the job's episode as the environment played it, or None.
        A truncated episode may end with one turn sampled but not sent (the agent stopped
        between the two)."""
        sampled, segment = _sampled_turns(trajectory), trajectory.current
        known, played = segment.client_messages, job.transcript
        if (truncated and sampled == job.forwarded + 1 and segment.num_turns
                and known[-1].get("role") == "assistant"):
            sampled, known = sampled - 1, known[:-1]
        if sampled != job.forwarded:
            return f"{sampled} turns sampled, {job.forwarded} sent to the environment"
        if _canonical(segment.tools) != _canonical(job.tools):
            return "the tools given to the policy are not the environment's"
        # Up to the last turn sent at least; the environment's reply to it may be missing.
        last_turn = max((i for i, m in enumerate(played) if m.get("role") == "assistant"),
                        default=-1)
        if (not last_turn < len(known) <= len(played)
                or first_difference(known, played) < len(known)):
            return "the messages given to the policy are not the environment's"
        return None

    # ---- endings -------------------------------------------------------------------------------

    async def _cancel_session(self, job: Job) -> None:
        assert job.session_id is not None
        try:
            await self.controller.cancel(job.session_id)
        except (ControllerRequestError, httpx.HTTPError) as e:  # the controller's expiry cleans
            log.warning("cancelling session %s of %s failed: %r", job.session_id,
                        job.trajectory_id, e)

    async def _finish(self, job: Job, reward: float, status: SampleStatus,
                      metrics: dict[str, Any], error: str | None = None) -> None:
        """Ends the job's trajectory with the environment's outcome (refused if unfaithful)."""
        job.ended = True
        self._jobs.pop(job.trajectory_id, None)
        if job.session_id is not None:
            self._by_session.pop(job.session_id, None)
        store = self.service.trajectories
        metrics = {**metrics, "index": job.index}
        trajectory = store.get(job.trajectory_id)
        while trajectory is not None and trajectory.busy:  # a turn the agent began meanwhile
            await asyncio.sleep(0.01)
            trajectory = store.get(job.trajectory_id)
        if trajectory is not None and status is not SampleStatus.TASK_ERROR:
            why = self._unfaithful(job, trajectory, status is SampleStatus.RUNNING)
            if why is not None:
                log.warning("trajectory %s refused: %s", job.trajectory_id, why)
                reward, status = 0.0, SampleStatus.AGENT_VALIDATION_FAILED
                metrics["refused"] = why
        job.status, job.reward = status, float(reward)
        self.ended.append(job)
        if trajectory is None:
            failed = Rollout.failed(job.task, job.index, job.group_id, job.member,
                                    error or "no turn was sampled")
            self._finished.append(dataclasses.replace(
                failed, status=status, reward=float(reward), error=error, metrics={
                    **metrics, "trajectory_id": job.trajectory_id,
                    "group_size": job.group_size}))
            return
        store.finish(job.trajectory_id, reward, status, task=job.task, group_id=job.group_id,
                     member=job.member, group_size=job.group_size, metrics=metrics)
        for session in store.session_ids(trajectory):
            await self.service.engine.end_session(session)


def _sampled_turns(trajectory: Trajectory) -> int:
    return sum(segment.num_turns for segment in trajectory.segments)


def _canonical(tools: list[dict[str, Any]] | None) -> str:
    return json.dumps(tools or [], sort_keys=True)


def _passed_on(error: Exception) -> GatewayError:
    if isinstance(error, ControllerRequestError):
        return GatewayError(error.status_code, error.detail)
    return GatewayError(502, f"the controller could not be reached: {error!r}")


def without_caller_rewards(app: ASGIApp) -> ASGIApp:
    """`app` (the server's) with `POST /v1/trajectories/{id}/reward` refused (403): while the
    gateway gives rewards, an agent must not give its own."""

    async def guarded(scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "") if scope["type"] == "http" else ""
        if path.startswith("/v1/trajectories/") and path.endswith("/reward"):
            refusal = errors.APIError(403, "rewards come from the environment here, not from "
                                      "the caller", type="permission_error",
                                      code="rewards_from_environment")
            await refusal.response()(scope, receive, send)
            return
        await app(scope, receive, send)

    return guarded
