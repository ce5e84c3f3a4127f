"""ToolRounds: the round loop of tool-calling tasks, through the worker's EpisodeTable."""

from __future__ import annotations

import asyncio
import json

from agentrl_jax.episode import SampleStatus
from environments.worker.agent_input import MAX_ARGUMENT_CHARS
from environments.worker.episodes import EpisodeTable
from environments.worker.rounds import (
    BAD_ARGUMENTS,
    EXTRA_CALL,
    UNKNOWN_FUNCTION,
    Reply,
    ToolHandler,
    ToolRounds,
)
from environments.worker.task import AgentTurn, EpisodeResult, Session, Task, ToolCall


class CountingRounds(ToolRounds):
    """`add(n)` adds to a total, `stop()` ends with the total as reward."""

    def __init__(self, session: Session, max_rounds: int, one_call_per_turn: bool) -> None:
        super().__init__(session, max_rounds)
        self.one_call_per_turn = one_call_per_turn
        self.total = 0
        self.rounds_begun: list[int] = []

    def before_turn(self) -> None:
        self.rounds_begun.append(self.round)

    def tool(self, name: str) -> ToolHandler | None:
        return {"add": self.add, "stop": self.stop}.get(name)

    async def add(self, call: ToolCall, arguments: dict) -> Reply:
        self.total += arguments.get("n", 1)
        return Reply(f"total {self.total}")

    async def stop(self, call: ToolCall, arguments: dict) -> Reply:
        return Reply("stopped", EpisodeResult(SampleStatus.COMPLETED, float(self.total),
                                              {"rounds": self.rounds_begun}))

    async def without_calls(self, turn: AgentTurn) -> Reply:
        return Reply("call a tool")

    def limit_reached(self) -> EpisodeResult:
        return EpisodeResult(SampleStatus.TASK_LIMIT_REACHED, 0.0, {"rounds": self.rounds_begun})


class CountingTask(Task):
    name = "counting"

    def __init__(self, max_rounds: int = 3, one_call_per_turn: bool = False) -> None:
        self.max_rounds, self.one_call_per_turn = max_rounds, one_call_per_turn

    def indices(self):
        return [0]

    async def episode(self, index, session):
        session.inject({"role": "user", "content": "count"})
        return await CountingRounds(session, self.max_rounds, self.one_call_per_turn).run()


def turn(*calls: tuple[str, str, str]) -> list[dict]:
    """An assistant message with the calls (id, name, raw arguments)."""
    return [{"role": "assistant", "content": "",
             "tool_calls": [{"id": call_id, "type": "function",
                             "function": {"name": name, "arguments": raw}}
                            for call_id, name, raw in calls]}]


def tool(call_id: str, content: str) -> dict:
    return {"role": "tool", "tool_call_id": call_id, "content": content}


def play(task: Task, turns: list[list[dict]]) -> list:
    """The outputs of the start and of each turn."""
    async def main():
        table = EpisodeTable(task)
        outputs = [await table.start(1, 0)]
        for messages in turns:
            outputs.append(await table.interact(1, messages))
        return outputs

    return asyncio.run(main())


def test_every_call_is_answered_in_order_until_one_ends_the_episode():
    start, first, last = play(CountingTask(), [
        turn(("a", "add", '{"n": 2}'), ("b", "add", "{}")),
        turn(("c", "add", '{"n": 3}'), ("d", "stop", "{}"), ("e", "add", "{}")),
    ])
    assert start.messages == [{"role": "user", "content": "count"}]
    assert first.messages == [tool("a", "total 2"), tool("b", "total 3")] and not first.finish
    assert last.messages == [tool("c", "total 6"), tool("d", "stopped")]   # "e" is not run
    assert (last.status, last.reward, last.metric) == ("completed", 6.0, {"rounds": [1, 2]})


def test_mistakes_are_answered_and_cost_the_round():
    too_long = json.dumps({"n": "x" * MAX_ARGUMENT_CHARS})
    outputs = play(CountingTask(max_rounds=2), [
        [{"role": "assistant", "content": "no call"}],
        turn(("a", "add", "{oops"), ("b", "add", too_long), ("c", "nope", "{}"),
             ("d", "add", "[1]")),
    ])
    assert outputs[1].messages == [{"role": "user", "content": "call a tool"}]
    bad, refused, unknown, not_an_object = (m["content"] for m in outputs[2].messages)
    assert bad == not_an_object == BAD_ARGUMENTS and unknown == UNKNOWN_FUNCTION
    assert refused.startswith("Error: the tool call's arguments are")
    assert outputs[2].status == "task limit reached"
    assert outputs[2].metric == {"rounds": [1, 2]}


def test_one_call_per_turn_answers_the_others_after_the_first():
    outputs = play(CountingTask(one_call_per_turn=True), [
        turn(("a", "add", '{"n": 5}'), ("b", "add", "{}"), ("c", "stop", "{}")),
        turn(("d", "stop", "{}"), ("e", "add", "{}")),
    ])
    assert outputs[1].messages == [tool("a", "total 5"), tool("b", EXTRA_CALL),
                                   tool("c", EXTRA_CALL)]
    assert outputs[2].messages == [tool("d", "stopped"), tool("e", EXTRA_CALL)]
    assert (outputs[2].status, outputs[2].reward) == ("completed", 5.0)
