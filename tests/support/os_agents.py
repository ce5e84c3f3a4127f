"""Scripted OS-task agents: a fixed message per turn, and the task's tool calls."""

from __future__ import annotations

from environments.oracle import tool_call_message


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
