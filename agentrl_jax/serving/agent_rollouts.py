"""Rollouts played by an agent program the project did not write: over the OpenAI API.

The RL pipeline's groups come from runs of an agent command (`command`, e.g.
examples/openai_agent/agent.py) instead of the project's agent loop: `AgentRollouts` is a
rollout source (`pipeline.rollout_source`). Attached to the pipeline, in its event loop, it
serves on loopback the OpenAI server (`serving.app`) over the pipeline's engine (so every
weight version the pipeline syncs is what the agent samples next) with the task gateway
(`serving.task_gateway`) mounted under `/tasks`. It draws each group from the pipeline's feed
(`GroupFeed.draw`) when the staleness gate admits it (`GroupFeed.wait_for_admission`), runs
the agent once per member, at most `agents` at once, each as its own process, and files the
ended episodes as the pipeline's groups (`serving.groups.ServedGroups`, `GroupFeed.add_group`).

An agent process is given its episode in its environment (the contract an agent program
implements; the `openai` client reads the first two itself):

  OPENAI_BASE_URL         the server, http://127.0.0.1:PORT/v1
  OPENAI_API_KEY          the server's key (random per run), also the gateway's
  AGENTRL_MODEL           the served model name
  AGENTRL_CONTROLLER_URL  the gateway, http://127.0.0.1:PORT/tasks/api (AgentRL's routes)
  AGENTRL_CONTROLLER_KEY  the key again, as `Authorization: Bearer` on the gateway's routes
  AGENTRL_TASK, AGENTRL_INDEX   the episode: the controller's task name, the index (JSON)
  AGENTRL_TRAJECTORY_ID   the id its chat requests carry (`extra_body` or X-Trajectory-Id),
                          and its start_sample the header X-Trajectory-Id
  AGENTRL_MAX_TURNS, AGENTRL_MAX_TOKENS   the run's episode limits (`rl.limits`)

The episode's reward is the environment's, through the gateway; the server's reward route is
closed. While training, every turn is sampled with the pipeline's own sampling settings
(`TrainerSampling`), whatever the agent asks, so that behaviour log-probabilities are those the
trainer's importance ratios assume. An agent that exits, fails or outlives `episode_timeout_s`
ends its job (`TaskGateway.end_job`); its stderr goes to the log.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import os
import secrets
import socket
import sys
from collections.abc import AsyncIterator, Callable, Generator
from typing import Any

import ml_collections
import uvicorn

from agentrl_jax.controller.client import ControllerClient
from agentrl_jax.pipeline.rollout_source import GroupFeed, require_group_size
from agentrl_jax.rollout.agent_loop import AgentSpec
from agentrl_jax.rollout.cross_policy import TRAINED_POLICY
from agentrl_jax.sampling.engine import TokenCallback
from agentrl_jax.sampling.types import GenerateRequest, GenerationResult, SamplingParams
from agentrl_jax.serving.app import create_app
from agentrl_jax.serving.groups import ServedGroups
from agentrl_jax.serving.service import Engine, ServerConfig, Service
from agentrl_jax.serving.task_gateway import Job, TaskGateway, without_caller_rewards

log = logging.getLogger(__name__)

GATEWAY_PREFIX = "/tasks"


def default_config() -> ml_collections.ConfigDict:
    return ml_collections.ConfigDict(dict(
        # The agent's command line; "{python}" is this interpreter. Run from the working
        # directory (the repository root, for the example's relative path).
        command=("{python}", "examples/openai_agent/agent.py"),
        agents=4,  # agent processes at once (episodes in flight)
        model_name="policy",  # the served model name
        episode_timeout_s=600.0,  # an agent still running after this is stopped
        # This many agent runs failing in a row (exit status, start, timeout) stop the run:
        # a broken agent would otherwise leave the trainer waiting for ever.
        max_failures_in_a_row=16,
    ))


class TrainerSampling:
    """The server's engine while the policy is trained: each turn sampled with `sampling`'s
    temperature, top-p and top-k and a fresh seed, whatever the request asks (an agent can
    neither sample off the trained distribution nor choose its samples by seed)."""

    def __init__(self, engine: Engine, sampling: SamplingParams):
        self.engine, self.sampling = engine, sampling

    async def generate(self, request: GenerateRequest, on_tokens: TokenCallback | None = None
                       ) -> GenerationResult:
        params = dataclasses.replace(request.params, temperature=self.sampling.temperature,
                                     top_p=self.sampling.top_p, top_k=self.sampling.top_k,
                                     seed=None)
        return await self.engine.generate(dataclasses.replace(request, params=params),
                                          on_tokens)

    async def end_session(self, session_id: str) -> None:
        await self.engine.end_session(session_id)

    async def policies(self) -> dict[str, int]:
        return await self.engine.policies()


class _LoopServer(uvicorn.Server):
    """uvicorn in the caller's event loop; the launcher keeps its own signal handling."""

    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        yield


@contextlib.asynccontextmanager
async def serve_in_loop(app: Any) -> AsyncIterator[str]:
    """Serves `app` on a free 127.0.0.1 port in the running event loop; yields its URL."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    server = _LoopServer(uvicorn.Config(app, log_level="warning", access_log=False))
    task = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        while not server.started:
            if task.done():
                task.result()
                raise RuntimeError("the server stopped during start-up")
            await asyncio.sleep(0.01)
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        await asyncio.gather(task, return_exceptions=True)
        sock.close()


class AgentRollouts:
    """The pipeline's groups played by runs of an agent command (the module docstring); a
    rollout source."""

    def __init__(self, config: ml_collections.ConfigDict, agent: AgentSpec, group_size: int,
                 *, engine: Engine, controller_url: str, max_context: int):
        """`agent`: the pipeline's sampling settings, limits and chat format; `engine`: what
        the server samples with (the pipeline's engine); `max_context`: its context limit, in
        tokens."""
        self.config, self.group_size = config, int(group_size)
        self.limits = agent.limits
        self.api_key = secrets.token_urlsafe(24)
        self.service = Service(
            TrainerSampling(engine, agent.sampling), agent.tokenizer, agent.parser,
            agent.end_of_turn_ids or (agent.tokenizer.eos_token_id,),
            ServerConfig(models={config.model_name: TRAINED_POLICY}, max_context=max_context,
                         default_max_tokens=agent.limits.max_new_tokens,
                         max_concurrent=max(64, 2 * int(config.agents)),
                         api_key=self.api_key))
        self.controller = ControllerClient(controller_url, start_jitter_s=0.0)
        self.gateway = TaskGateway(self.controller, self.service)
        self.groups = ServedGroups(default_size=self.group_size)
        app = create_app(self.service)
        app.mount(GATEWAY_PREFIX, self.gateway.app())
        self.app = without_caller_rewards(app)
        self.url: str | None = None
        self.episodes = 0  # agent runs ended
        self._stack = contextlib.AsyncExitStack()
        self._tasks: list[asyncio.Task] = []
        self._next_group = 0
        self._failures_in_a_row = 0
        self._feed: GroupFeed | None = None

    async def attach(self, feed: GroupFeed) -> None:
        """Starts the server, the filing of ended episodes and the agents."""
        require_group_size("agent rollouts", self.group_size, feed)
        self._feed = feed
        await self.groups.attach(feed)
        self.url = await self._stack.enter_async_context(serve_in_loop(self.app))
        self._tasks = [asyncio.create_task(self.groups.feed_from(self.gateway.pop_finished)),
                       asyncio.create_task(self._dispatch(feed))]

    async def detach(self) -> None:
        """Stops the agents (their jobs end), the filing and the server."""
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self._stack.aclose()
        await self.controller.aclose()
        await self.groups.detach()
        self._feed = None

    def _ended(self, failed: str | None) -> None:
        """Counts an agent run; fails the feed (the run stops) after `max_failures_in_a_row`
        failed runs in a row."""
        self.episodes += 1
        self._failures_in_a_row = self._failures_in_a_row + 1 if failed else 0
        limit = int(self.config.max_failures_in_a_row)
        if failed and self._failures_in_a_row == limit and self._feed is not None:
            self._feed.fail(RuntimeError(f"the agent failed {limit} times in a row, the last: "
                                         f"{failed}"))

    def environment(self, job: Job) -> dict[str, str]:
        """An agent process's environment for `job` (the contract in the module docstring)."""
        assert self.url is not None, "the server is started"
        return {**os.environ,
                "OPENAI_BASE_URL": f"{self.url}/v1", "OPENAI_API_KEY": self.api_key,
                "AGENTRL_MODEL": self.config.model_name,
                "AGENTRL_CONTROLLER_URL": f"{self.url}{GATEWAY_PREFIX}/api",
                "AGENTRL_CONTROLLER_KEY": self.api_key,
                "AGENTRL_TASK": job.task, "AGENTRL_INDEX": json.dumps(job.index),
                "AGENTRL_TRAJECTORY_ID": job.trajectory_id,
                "AGENTRL_MAX_TURNS": str(self.limits.max_turns),
                "AGENTRL_MAX_TOKENS": str(self.limits.max_new_tokens)}

    def command(self) -> list[str]:
        return [sys.executable if part == "{python}" else str(part)
                for part in self.config.command]

    async def _dispatch(self, feed: GroupFeed) -> None:
        """Draws groups from the feed as its staleness gate admits them and runs their
        members' agents, at most `agents` at once, until detached."""
        slots = asyncio.Semaphore(int(self.config.agents))
        running: set[asyncio.Task] = set()
        try:
            while True:
                # The staleness bound, counting the groups in play (drawn, not yet filed).
                await feed.wait_for_admission(lambda: self._next_group - self.groups.submitted)
                task, index = feed.draw()
                group_id, size = self._next_group, self.group_size
                self._next_group += 1
                for member in range(size):
                    await slots.acquire()
                    job = Job(task, index, group_id, member, size,
                              f"{task}/g{group_id}/m{member}/{secrets.token_hex(6)}")
                    self.gateway.add_job(job)
                    episode = asyncio.create_task(self._episode(job, slots.release))
                    running.add(episode)
                    episode.add_done_callback(running.discard)
        finally:
            for episode in list(running):
                episode.cancel()
            await asyncio.gather(*running, return_exceptions=True)

    async def _episode(self, job: Job, release: Callable[[], None]) -> None:
        """One run of the agent on `job`; the job ends however the run does."""
        why, failed = "the agent exited", None
        try:
            process = await asyncio.create_subprocess_exec(
                *self.command(), env=self.environment(job), stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE)
            try:
                _, stderr = await asyncio.wait_for(process.communicate(),
                                                   float(self.config.episode_timeout_s))
                if process.returncode:
                    why = f"the agent exited with status {process.returncode}"
                    failed = f"{why}: {_tail(stderr)}"
                    log.warning("agent on %s: %s", job.trajectory_id, failed)
            except TimeoutError:
                why = failed = f"the agent ran over {self.config.episode_timeout_s} s"
                log.warning("agent on %s: %s", job.trajectory_id, why)
            finally:
                if process.returncode is None:
                    why = "the agent was stopped" if why == "the agent exited" else why
                    process.kill()
                    await process.wait()
        except OSError as e:
            why = failed = f"the agent could not be started: {e!r}"
            log.warning("agent on %s: %s", job.trajectory_id, why)
        finally:
            try:
                await self.gateway.end_job(job.trajectory_id, why)
            finally:
                release()
        self._ended(failed)


def _tail(stderr: bytes | None, lines: int = 8) -> str:
    return "\n".join((stderr or b"").decode(errors="replace").splitlines()[-lines:])


def source(config: ml_collections.ConfigDict, *, engine: Engine, controller_url: str,
           max_context: int) -> Callable[[AgentSpec, ml_collections.ConfigDict], AgentRollouts]:
    """What `experiment.rl_stage.run_rl(rollouts=...)` takes: (the pipeline's agent spec and
    config) -> `AgentRollouts` for `config` (`default_config()`'s keys), over `engine` and the
    controller at `controller_url`."""
    return lambda agent, pipeline_config: AgentRollouts(
        config, agent, pipeline_config.group_size, engine=engine,
        controller_url=controller_url, max_context=max_context)

