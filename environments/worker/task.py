"""What an environment implements: a `Task` and its episodes, talking to the agent via a `Session`.

An episode is one coroutine:

    async def episode(self, index, session):
        session.inject({"role": "user", "content": "Say hello."})
        turn = await session.action()          # the agent's next assistant message(s)
        ok = "hello" in turn.content.lower()
        return EpisodeResult(SampleStatus.COMPLETED, reward=float(ok))

`inject` queues messages for the agent; `action()` hands everything queued so far to the agent
(it becomes the HTTP answer to start_sample or interact) and suspends until the agent's next
interact. Returning ends the episode; so does raising (status `task error`) or being cancelled
(status `cancelled`). Cancellation is delivered as `asyncio.CancelledError`: let it propagate.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
from typing import Any

from agentrl_jax.controller.wire import Message
from agentrl_jax.episode import SampleIndex, SampleStatus
from environments.worker.agent_input import argument_error


@dataclasses.dataclass(frozen=True)
class ToolCall:
    """One function call of an assistant message; `arguments` is None when not a JSON object.

    `error` says why the arguments were refused unparsed (too long), for the agent to read.
    """

    id: str
    name: str
    arguments: dict[str, Any] | None
    raw_arguments: str
    error: str | None = None


@dataclasses.dataclass(frozen=True)
class AgentTurn:
    """The messages the agent sent in one interact (normally a single assistant message)."""

    messages: list[Message]

    @property
    def message(self) -> Message:
        return self.messages[-1] if self.messages else {}

    @property
    def content(self) -> str:
        content = self.message.get("content")
        return content if isinstance(content, str) else ""

    def tool_calls(self) -> list[ToolCall]:
        """Parses the OpenAI `tool_calls` of the last message, skipping malformed entries."""
        calls = []
        for position, call in enumerate(self.message.get("tool_calls") or []):
            if not isinstance(call, dict) or not isinstance(call.get("function"), dict):
                continue
            function = call["function"]
            raw = function.get("arguments")
            raw = raw if isinstance(raw, str) else json.dumps(raw)
            error = argument_error(raw)
            arguments = None
            if error is None:
                try:
                    arguments = json.loads(raw)
                except (ValueError, RecursionError):
                    arguments = None
            calls.append(ToolCall(
                id=str(call.get("id", position)),
                name=str(function.get("name", "")),
                arguments=arguments if isinstance(arguments, dict) else None,
                raw_arguments=raw,
                error=error,
            ))
        return calls


@dataclasses.dataclass
class EpisodeResult:
    status: SampleStatus = SampleStatus.COMPLETED
    reward: float = 0.0
    metrics: dict[str, Any] = dataclasses.field(default_factory=dict)


class Session:
    """One episode's channel to the agent. Created by the worker, handed to `Task.episode`."""

    def __init__(self, session_id: int, index: SampleIndex) -> None:
        self.id = session_id
        self.index = index
        self.history: list[Message] = []   # every message of the episode, both directions
        self.tools: list[dict[str, Any]] | None = None   # per-episode override of Task.tools
        self._outbox: list[Message] = []   # injected since the last hand-off to the agent
        self._agent_reply: asyncio.Future[list[Message]] | None = None
        self._turn_ready: asyncio.Future[None] | None = None
        self._cancelled = False

    def inject(self, message: Message | list[Message]) -> None:
        """Queues environment message(s) (`tool`, `user`, ...) for the agent's next observation."""
        for item in message if isinstance(message, list) else [message]:
            if not isinstance(item, dict) or not isinstance(item.get("role"), str):
                raise TypeError(f"a message is a dict with a string 'role', got {item!r}")
            self.history.append(item)
            self._outbox.append(item)

    async def action(self) -> AgentTurn:
        """Hands the queued messages to the agent and waits for its next turn."""
        if self._cancelled:
            # The task swallowed its cancellation and came back for more. Its slot is already
            # free; park it forever instead of letting it spin on a repeated exception. When
            # the garbage collector closes the coroutine there is no loop to park on: yield
            # once, which makes `close()` give up on the coroutine instead of spinning in it.
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:
                await _YieldOnce()
            else:
                await loop.create_future()
        reply = asyncio.get_running_loop().create_future()
        self._agent_reply = reply
        self._signal_turn_ready()
        messages = await reply
        self.history.extend(messages)
        return AgentTurn(messages)

    # The worker's side of the hand-off. -------------------------------------------------

    def take_outbox(self) -> list[Message]:
        out, self._outbox = self._outbox, []
        return out

    def expect_turn(self) -> asyncio.Future[None]:
        """A future that resolves when the episode next yields to the agent or ends."""
        self._turn_ready = asyncio.get_running_loop().create_future()
        return self._turn_ready

    def deliver(self, messages: list[Message]) -> None:
        """Resumes the episode's pending `action()` with the agent's messages."""
        reply, self._agent_reply = self._agent_reply, None
        if reply is None or reply.done():
            raise RuntimeError(f"session {self.id} is not waiting for the agent")
        reply.set_result(messages)

    @property
    def waiting_for_agent(self) -> bool:
        return self._agent_reply is not None and not self._agent_reply.done()

    def mark_cancelled(self) -> None:
        self._cancelled = True
        self._signal_turn_ready()

    def notify_ended(self) -> None:
        self._signal_turn_ready()

    def _signal_turn_ready(self) -> None:
        if self._turn_ready is not None and not self._turn_ready.done():
            self._turn_ready.set_result(None)


class _YieldOnce:
    def __await__(self):
        yield


class Task:
    """Base class of every environment. Subclasses set the class attributes and `episode`.

    One instance serves all sessions of a worker concurrently, so per-episode state belongs in
    `episode`'s locals, not on `self`.
    """

    name: str = ""                                  # defaults to the environment's folder name
    concurrency: int = 16                           # sessions one worker holds at once
    tools: list[dict[str, Any]] | None = None       # OpenAI function schemas
    # Params for a worker that a host-root launcher starts *outside* a worker sandbox, or None
    # (the default: sandbox it). Set by a task that runs no agent code in its worker process and
    # isolates what the agent runs in per-episode sandboxes of its own, whose bounds need host
    # root (mounts, cgroups); a worker sandbox would take them away (docs/security.md). A
    # launcher that is not host root refuses to start such a task, unless asked for the
    # fallback: then its worker gets `host_root_fallback_params` instead (the task's weaker
    # configuration, stated rather than picked quietly).
    host_root_params: tuple[str, ...] | None = None
    host_root_fallback_params: tuple[str, ...] = ()

    def indices(self) -> list[SampleIndex]:
        """The sample indices this task serves (ints, or strings the controller maps to ints)."""
        raise NotImplementedError

    async def episode(self, index: SampleIndex, session: Session) -> EpisodeResult:
        raise NotImplementedError

    async def custom_episode(self, spec: dict[str, Any], session: Session) -> EpisodeResult:
        """An episode described by the caller (AgentRL's index -1 with `custom_task`)."""
        raise NotImplementedError(f"task {self.name!r} takes no custom tasks")

    async def close(self) -> None:
        """Releases shared resources when the worker stops."""
