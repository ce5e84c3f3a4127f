"""EpisodeTable: the worker's session rules without HTTP."""

from __future__ import annotations

import asyncio
import gc

import pytest

from agentrl_jax.episode import SampleStatus
from environments.echo import EchoTask
from environments.registry import load_task, task_names
from environments.worker.episodes import EpisodeTable, SessionBusy, SessionUnknown, WorkerFull
from environments.worker.task import AgentTurn, EpisodeResult, Session, Task


def echo_call(text: str, call_id: str = "0") -> dict:
    return {"role": "assistant", "content": "",
            "tool_calls": [{"id": call_id, "type": "function",
                            "function": {"name": "echo", "arguments": f'{{"text": "{text}"}}'}}]}


class StubbornTask(Task):
    """Swallows its cancellation and asks for more: the worker must free the slot anyway."""

    name = "stubborn"
    concurrency = 1

    def indices(self):
        return [0]

    async def episode(self, index, session):
        session.inject({"role": "user", "content": "go"})
        while True:
            try:
                await session.action()
            except BaseException:   # deliberately wrong: swallows CancelledError
                pass


class SlowTask(Task):
    name = "slow"

    def indices(self):
        return [0]

    async def episode(self, index, session):
        await asyncio.sleep(3600)
        return EpisodeResult()


class SlowToolTask(Task):
    """Answers the start at once; the agent's first action then takes an hour."""

    name = "slow-tool"

    def indices(self):
        return [0]

    async def episode(self, index, session):
        await session.action()
        await asyncio.sleep(3600)
        return EpisodeResult()


class BrokenTask(Task):
    name = "broken"

    def indices(self):
        return [0]

    async def episode(self, index, session):
        session.inject({"role": "user", "content": "about to fail"})
        await session.action()
        raise RuntimeError("environment exploded")


def test_echo_episode_runs_to_completion():
    async def main():
        table = EpisodeTable(EchoTask(rounds=2))
        first = await table.start(7, 3)
        assert first.status == "running" and not first.finish
        assert first.messages == [{"role": "user", "content": "Call echo 2 times."}]
        assert first.tools[0]["function"]["name"] == "echo"
        second = await table.interact(7, [echo_call("a", "c1")])
        assert second.messages == [{"role": "tool", "tool_call_id": "c1", "content": "a"}]
        assert not second.finish
        last = await table.interact(7, [echo_call("b")])
        assert last.finish and last.status == "completed" and last.reward == 1.0
        assert last.metric == {"turns": 2}
        assert table.current == 0   # the slot is free as soon as the episode ends

    asyncio.run(main())


def test_invalid_action_status_and_feedback():
    async def main():
        table = EpisodeTable(EchoTask(rounds=3))
        await table.start(1, 0)
        out = await table.interact(1, [{"role": "assistant", "content": "no tool"}])
        assert out.finish and out.status == SampleStatus.AGENT_INVALID_ACTION
        assert out.messages[-1]["content"] == "No executable tool calls found."

    asyncio.run(main())


def test_concurrency_cap_and_busy_session():
    async def main():
        table = EpisodeTable(EchoTask(), concurrency=2)
        await table.start(1, 0)
        await table.start(2, 0)
        with pytest.raises(WorkerFull):
            await table.start(3, 0)
        with pytest.raises(SessionUnknown):
            await table.interact(99, [echo_call("x")])
        # A second interact while the first is in flight is refused.
        slow = EpisodeTable(SlowInteractTask())
        await slow.start(5, 0)
        first = asyncio.create_task(slow.interact(5, [echo_call("x")]))
        await asyncio.sleep(0.01)
        with pytest.raises(SessionBusy):
            await slow.interact(5, [echo_call("y")])
        await slow.cancel(5)
        assert (await first).status == "cancelled"

    asyncio.run(main())


class SlowInteractTask(Task):
    name = "slow-interact"

    def indices(self):
        return [0]

    async def episode(self, index, session):
        session.inject({"role": "user", "content": "hi"})
        await session.action()
        await asyncio.sleep(3600)   # an environment step that never ends
        return EpisodeResult()


# The orphans are abandoned when collected ("coroutine ignored GeneratorExit"): expected here.
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_cancel_frees_slot_even_if_task_swallows_cancellation():
    async def main():
        table = EpisodeTable(StubbornTask(), cancel_grace_s=0.05)
        await table.start(1, 0)
        with pytest.raises(WorkerFull):
            await table.start(2, 0)
        await table.cancel(1)
        assert table.current == 0
        assert len(table.orphans) == 1          # still running, parked, holding no slot
        out = await table.start(2, 0)           # the slot is usable again
        assert out.status == "running"
        with pytest.raises(SessionUnknown):
            await table.cancel(1)
        await table.cancel_all()   # as the worker does at shutdown; must not hang either
        assert table.current == 0 and len(table.orphans) == 2
        table.orphans.clear()

    asyncio.run(main())
    gc.collect()   # closing the orphans outside any loop must not spin (it used to hang)


def test_call_timeout_ends_episode_with_task_error():
    async def main():
        table = EpisodeTable(SlowTask(), call_timeout_s=0.05)
        out = await table.start(1, 0)
        assert out.finish and out.status == "task error"
        assert "exceeded" in out.metric["error"]
        assert table.current == 0

    asyncio.run(main())


def test_action_past_the_call_timeout_is_the_agents():
    async def main():
        table = EpisodeTable(SlowToolTask(), call_timeout_s=0.05)
        assert (await table.start(1, 0)).status == "running"
        out = await table.interact(1, [{"role": "assistant", "content": "sleep 3600"}])
        assert out.finish and out.status == SampleStatus.AGENT_INVALID_ACTION
        assert "call time limit" in out.metric["error"]
        assert table.current == 0

    asyncio.run(main())


def test_exception_in_episode_is_task_error():
    async def main():
        table = EpisodeTable(BrokenTask())
        await table.start(1, 0)
        out = await table.interact(1, [{"role": "assistant", "content": "ok"}])
        assert out.finish and out.status == "task error"
        assert "environment exploded" in out.metric["error"]
        assert table.current == 0

    asyncio.run(main())


def test_idle_sessions_expire():
    async def main():
        table = EpisodeTable(EchoTask(), idle_timeout_s=0.0)
        await table.start(1, 0)
        await asyncio.sleep(0.01)
        assert await table.expire_idle() == 1
        assert table.current == 0

    asyncio.run(main())


def test_custom_episode():
    async def main():
        table = EpisodeTable(EchoTask())
        out = await table.start(1, -1, {"turns": 1})
        assert out.messages[0]["content"] == "Call echo 1 times."
        out = await table.interact(1, [echo_call("z")])
        assert out.finish and out.reward == 1.0

    asyncio.run(main())


def test_agent_turn_parses_tool_calls():
    turn = AgentTurn([{"role": "assistant", "content": "x", "tool_calls": [
        {"id": "a", "function": {"name": "f", "arguments": '{"k": 1}'}},
        {"id": "b", "function": {"name": "g", "arguments": "not json"}},
        "garbage",
    ]}])
    calls = turn.tool_calls()
    assert [(c.id, c.name, c.arguments) for c in calls] == [("a", "f", {"k": 1}),
                                                             ("b", "g", None)]
    assert turn.content == "x"


def test_session_inject_rejects_non_messages():
    session = Session(1, 0)
    with pytest.raises(TypeError):
        session.inject("text")   # type: ignore[arg-type]


def test_registry_finds_tasks_by_folder():
    assert "echo" in task_names()
    task = load_task("echo", num_samples=3)
    assert task.name == "echo" and task.indices() == [0, 1, 2]
    with pytest.raises(KeyError):
        load_task("no_such_task")
    external = load_task("environments.echo:EchoTask")
    assert isinstance(external, EchoTask)
