"""Every evaluated episode's transcript, to read why it ended as it did.

`TranscriptLog` is an `on_episode` callback of `agentbench.evaluate`: it keeps each finished
rollout's task, index, reward, status, turn count and messages, and `write` puts them in
`OUT/NAME_episodes.jsonl`, one episode per line, ordered by task and index so that two runs
diff line by line. `evaluation.first_call.summarize` reads these records.
"""

from __future__ import annotations

import json
import pathlib
from typing import Any

from agentrl_jax.rollout.record import Rollout


def transcripts_path(out: pathlib.Path, name: str) -> pathlib.Path:
    """Where the transcripts of evaluation `name` go."""
    return out / f"{name}_episodes.jsonl"


def _order(episode: dict[str, Any]) -> tuple:
    """Task, then index: numerically for integer indices, as text for any other."""
    index = episode["index"]
    return (episode["task"], *((0, index, "") if isinstance(index, int) else (1, 0, str(index))))


class TranscriptLog:
    """The episodes of one evaluation, recorded as they finish."""

    def __init__(self) -> None:
        self.episodes: list[dict[str, Any]] = []

    def __call__(self, rollout: Rollout) -> None:
        self.episodes.append({"task": rollout.task, "index": rollout.index,
                              "reward": rollout.reward, "status": str(rollout.status),
                              "turns": rollout.num_turns, "messages": rollout.messages})

    def write(self, out: pathlib.Path, name: str) -> pathlib.Path:
        path = transcripts_path(out, name)
        with open(path, "w") as f:
            for episode in sorted(self.episodes, key=_order):
                f.write(json.dumps(episode, default=str) + "\n")
        return path
