"""A tiny task for tests and benchmarks: echoes the agent and counts its turns.

Sample `i` asks for `i % 5 + 1` turns (so `rounds` tells how long an episode lasts). Each turn
the agent calls `echo(text)` and gets `text` back as a tool message; the episode completes with
reward 1 after the last turn. A turn without an `echo` call ends it with `agent invalid action`.
An agent message whose content is `"finish"` completes the episode early (reward 0.5), which
the benchmark uses to hold sessions open for as long as it likes.
"""

from __future__ import annotations

import asyncio
from typing import Any

from agentrl_jax.episode import SampleIndex, SampleStatus
from environments.worker.task import EpisodeResult, Session, Task

ECHO_TOOL = {
    "type": "function",
    "function": {
        "name": "echo",
        "description": "Echoes the given text back.",
        "parameters": {"type": "object", "properties": {"text": {"type": "string"}},
                       "required": ["text"]},
    },
}


class EchoTask(Task):
    name = "echo"
    tools = [ECHO_TOOL]

    def __init__(self, num_samples: int = 100, concurrency: int = 64,
                 rounds: int | None = None, step_delay_s: float = 0.0) -> None:
        self.num_samples = num_samples
        self.concurrency = concurrency
        self.rounds = rounds   # fixed number of turns for every sample; None: i % 5 + 1
        self.step_delay_s = step_delay_s   # simulated environment work per turn

    def indices(self) -> list[SampleIndex]:
        return list(range(self.num_samples))

    def turns_of(self, index: int) -> int:
        return self.rounds if self.rounds is not None else index % 5 + 1

    async def episode(self, index: SampleIndex, session: Session) -> EpisodeResult:
        if not isinstance(index, int) or not 0 <= index < self.num_samples:
            raise ValueError(f"echo has no sample {index!r}")
        turns = self.turns_of(index)
        session.inject({"role": "user", "content": f"Call echo {turns} times."})
        for turn_number in range(turns):
            turn = await session.action()
            if self.step_delay_s:
                await asyncio.sleep(self.step_delay_s)
            if turn.content == "finish":
                return EpisodeResult(SampleStatus.COMPLETED, reward=0.5,
                                     metrics={"turns": turn_number + 1})
            calls = [call for call in turn.tool_calls() if call.name == "echo"]
            if not calls:
                session.inject({"role": "user", "content": "No executable tool calls found."})
                return EpisodeResult(SampleStatus.AGENT_INVALID_ACTION, reward=0.0,
                                     metrics={"turns": turn_number + 1})
            for call in calls:
                text = (call.arguments or {}).get("text", "")
                session.inject({"role": "tool", "tool_call_id": call.id, "content": str(text)})
        return EpisodeResult(SampleStatus.COMPLETED, reward=1.0, metrics={"turns": turns})

    async def custom_episode(self, spec: dict[str, Any], session: Session) -> EpisodeResult:
        """A custom echo episode: `{"turns": n}`."""
        custom = EchoTask(num_samples=1, concurrency=self.concurrency,
                          rounds=int(spec.get("turns", 1)), step_delay_s=self.step_delay_s)
        return await custom.episode(0, session)


TASK = EchoTask
