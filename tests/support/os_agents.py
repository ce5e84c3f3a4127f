"""Scripted OS-task agents: a fixed message per turn, and the task's tool calls; a test split of
hand-written problems served by a real OS worker on the overlay root."""

from __future__ import annotations

import contextlib
import json
import os
import pathlib
from collections.abc import Iterator, Sequence
from typing import Any

from environments.oracle import running_worker, tool_call_message
from environments.os_interaction.data import load_split


class Scripted:
    """Plays `messages` in order, one per turn."""

    def __init__(self, *messages):
        self.messages = messages

    def next_message(self, index, history):
        return self.messages[sum(m["role"] == "assistant" for m in history)]


def bash(script: str) -> dict:
    return tool_call_message("bash_action", {"script": script})


def answer(text: str) -> dict:
    return tool_call_message("answer_action", {"answer": text})


def finish() -> dict:
    return tool_call_message("finish_action", {"thought": "done"})


def write_problems(directory: pathlib.Path, problems: Sequence[dict[str, Any]]) -> pathlib.Path:
    """`directory` as an OS data dir whose test split is `problems` (readable by the worker)."""
    os.chmod(directory, 0o755)
    (directory / "dev.json").write_text(json.dumps(list(problems)))
    (directory / "train.json").write_text("[]")
    return directory


@contextlib.contextmanager
def overlay_worker(data_dir: pathlib.Path) -> Iterator[str]:
    """The API URL of a real OS worker serving `data_dir`'s test split on the overlay root."""
    with running_worker("os_interaction", {"split": "test", "data_dir": str(data_dir),
                                           "root": "overlay"}) as api:
        yield api


class Problems:
    """The test split of `data_dir`, as the oracle reads problems."""

    def __init__(self, data_dir: pathlib.Path):
        self.problems = load_split("test", data_dir)

    def problem(self, index: int):
        return self.problems[index]
