"""The round loop of a tool-calling episode: the agent's turn, then the environment's answer.

AgentBench's tasks share one loop: up to `max_rounds` times the agent takes a turn and the
environment answers it, until an answer (or a turn without calls) ends the episode; an agent
that runs out of rounds ends it `task limit reached`. `Rounds` is that loop; `ToolRounds`
answers each turn's parsed tool calls through the task's handlers.

A task's `episode` does its own setup (a database, a machine, a game), injects its first
messages, and returns `await SomeRounds(session, max_rounds, ...).run()`. The subclass, one
instance per episode so that it may hold the episode's state, keeps only what is the task's:
its tools, its replies to mistakes, its reward and metrics.

Model output is untrusted: `ToolRounds` reads calls through `AgentTurn.tool_calls` (malformed
entries skipped, over-long arguments refused unparsed), and a handler is only ever given
arguments that parsed as a JSON object; what a bad call costs the agent is the task's choice
(`malformed_call`, `unknown_tool`): a round, or the episode.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from environments.worker.task import AgentTurn, EpisodeResult, Session, ToolCall

# AgentBench-FC's replies to a call it cannot run (its DB and OS tasks say exactly these).
BAD_ARGUMENTS = "Error: Failed to parse tool call. Tool call format is incorrect."
UNKNOWN_FUNCTION = "Invalid function call. Please call a tool instead."
# The reply to each call after the first of a turn, where one action is taken per turn.
EXTRA_CALL = "Only one action is taken per turn; this call was ignored."


@dataclasses.dataclass(frozen=True)
class Reply:
    """The environment's answer to one tool call, or to a turn without calls.

    `text` is said (a tool message to the call; a user message to a turn without calls), unless
    None. `ending`, when set, ends the episode with that result once `text` is said.
    """

    text: str | None = None
    ending: EpisodeResult | None = None


# A tool's implementation: the call and its arguments (always a JSON object) -> the reply.
ToolHandler = Callable[[ToolCall, dict[str, Any]], Awaitable[Reply]]


def answer_extra_calls(session: Session, call_ids: Iterable[str]) -> None:
    """Answers each call that was not acted on with `EXTRA_CALL`, so that every call of a turn
    has its tool message."""
    for call_id in call_ids:
        session.inject({"role": "tool", "tool_call_id": call_id, "content": EXTRA_CALL})


class Rounds:
    """One episode's loop of at most `max_rounds` agent turns (`run`), with the task's hooks.

    `round` is the number of the current round, from 1 (0 before the first).
    """

    def __init__(self, session: Session, max_rounds: int) -> None:
        self.session = session
        self.max_rounds = max_rounds
        self.round = 0

    async def run(self) -> EpisodeResult:
        """Plays the rounds: `before_turn`, the agent's turn, `take_turn`; `limit_reached` when
        `max_rounds` turns passed without an ending."""
        for round_number in range(1, self.max_rounds + 1):
            self.round = round_number
            self.before_turn()
            ending = await self.take_turn(await self.session.action())
            if ending is not None:
                return ending
        return self.limit_reached()

    def before_turn(self) -> None:
        """Hook, before each turn is asked for (e.g. the observation the turn answers)."""

    async def take_turn(self, turn: AgentTurn) -> EpisodeResult | None:
        """Hook: acts on the agent's turn; the result when it ends the episode, else None."""
        raise NotImplementedError

    def limit_reached(self) -> EpisodeResult:
        """Hook: the result of an episode whose rounds ran out."""
        raise NotImplementedError


class ToolRounds(Rounds):
    """Rounds whose turns are answered call by call by the task's tool handlers.

    Each turn's calls are answered in order, a tool message each (`answer_call`); a reply with
    an `ending` ends the episode and leaves the turn's later calls unanswered. With
    `one_call_per_turn`, only the first call is acted on and the others are answered
    `EXTRA_CALL`, after the first's reply, ending or not. A turn without calls is answered by
    `without_calls`, as a user message.
    """

    one_call_per_turn: bool = False

    async def take_turn(self, turn: AgentTurn) -> EpisodeResult | None:
        calls = turn.tool_calls()
        if not calls:
            reply = await self.without_calls(turn)
            if reply.text is not None:
                self.session.inject({"role": "user", "content": reply.text})
            return reply.ending
        acted, ignored = (calls[:1], calls[1:]) if self.one_call_per_turn else (calls, [])
        ending = None
        for call in acted:
            reply = await self.answer_call(call)
            if reply.text is not None:
                self.session.inject({"role": "tool", "tool_call_id": call.id,
                                     "content": reply.text})
            if reply.ending is not None:
                ending = reply.ending
                break
        answer_extra_calls(self.session, [call.id for call in ignored])
        return ending

    async def answer_call(self, call: ToolCall) -> Reply:
        """The reply to one call: `malformed_call` when its arguments are not a JSON object,
        `unknown_tool` when the task has no tool of its name, else the tool's handler's."""
        if call.arguments is None:
            return self.malformed_call(call)
        handler = self.tool(call.name)
        if handler is None:
            return self.unknown_tool(call)
        return await handler(call, call.arguments)

    def tool(self, name: str) -> ToolHandler | None:
        """Hook: the handler of the tool called `name`, or None when the task has none."""
        raise NotImplementedError

    async def without_calls(self, turn: AgentTurn) -> Reply:
        """Hook: the reply to a turn without tool calls."""
        raise NotImplementedError

    def malformed_call(self, call: ToolCall) -> Reply:
        """The reply to a call whose arguments were refused (`call.error`) or are not a JSON
        object; by default why they were refused, else `BAD_ARGUMENTS`."""
        return Reply(call.error or BAD_ARGUMENTS)

    def unknown_tool(self, call: ToolCall) -> Reply:
        """The reply to a call of a tool the task does not have; by default `UNKNOWN_FUNCTION`."""
        return Reply(UNKNOWN_FUNCTION)
