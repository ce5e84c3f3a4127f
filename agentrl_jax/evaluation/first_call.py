"""What an episode's first tool call says about a policy's format and copying (issue #17).

A task can only be solved by a policy whose calls the environment can execute, so the warm
start is judged first on its **first call**: well formed when it names an offered tool and its
arguments are a JSON object holding every required parameter. The **copy rate** measures
whether the policy reads its context: of the words in its calls' arguments, the fraction that
occur earlier in the episode (the entity names, admissible actions and product words that
actions copy). Both work on an episode's OpenAI-format messages and its task's tool schemas.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Sequence
from typing import Any

WORD = re.compile(r"[A-Za-z0-9_]+")  # what a "word" of an argument is, here and in sft


def call_arguments(call: dict[str, Any]) -> Any:
    """A tool call's arguments as JSON (None when they do not parse)."""
    arguments = call.get("arguments")
    if isinstance(arguments, str):
        try:
            return json.loads(arguments)
        except json.JSONDecodeError:
            return None
    return arguments


def first_call(messages: Sequence[dict[str, Any]], tools: Sequence[dict[str, Any]]
               ) -> str | None:
    """The tool the first assistant turn calls, if that call is well formed: the name of an
    offered tool and JSON-object arguments holding every required parameter; else None."""
    turn = next((m for m in messages if m["role"] == "assistant"), None)
    if turn is None or not turn.get("tool_calls"):
        return None
    call = turn["tool_calls"][0]["function"]
    schema = next((t["function"]["parameters"] for t in tools
                   if t["function"]["name"] == call["name"]), None)
    if schema is None:
        return None
    arguments = call_arguments(call)
    if not isinstance(arguments, dict) or any(k not in arguments
                                              for k in schema.get("required", [])):
        return None
    return call["name"]


def copy_rate(messages: Sequence[dict[str, Any]]) -> tuple[int, int]:
    """(argument words seen earlier in the episode, argument words) over every tool call.

    "Earlier" is every message before the calling turn (system prompt and task included);
    words are runs of letters, digits and underscores, compared case-insensitively.
    """
    seen: set[str] = set()
    copied = total = 0
    for message in messages:
        for tool_call in message.get("tool_calls") or []:
            arguments = call_arguments(tool_call["function"])
            text = json.dumps(arguments) if arguments is not None else str(
                tool_call["function"].get("arguments", ""))
            words = [w.lower() for w in WORD.findall(text)]
            if isinstance(arguments, dict):   # the parameter names are the schema's, not copies
                keys = {k.lower() for k in arguments}
                words = [w for w in words if w not in keys]
            copied += sum(w in seen for w in words)
            total += len(words)
        seen.update(w.lower() for w in WORD.findall(message.get("content") or ""))
    return copied, total


def demo_tools(demos: Iterable[dict[str, Any]], task_of: Callable[[str], str]
               ) -> tuple[dict[str, list[dict[str, Any]]], dict[str, set[str]]]:
    """(tool schemas per task, the oracle's first tools per task) from demonstration records
    (`sft.demos`); `task_of` maps a record's task key ("db-train") to its task ("db")."""
    tools: dict[str, list[dict[str, Any]]] = {}
    first_tools: dict[str, set[str]] = {}
    for demo in demos:
        task = task_of(demo["task"])
        tools[task] = demo["tools"]
        turn = next(m for m in demo["messages"] if m["role"] == "assistant")
        if turn.get("tool_calls"):
            first_tools.setdefault(task, set()).add(turn["tool_calls"][0]["function"]["name"])
    return tools, first_tools


def summarize(episodes: Iterable[dict[str, Any]], tools: dict[str, list[dict[str, Any]]],
              first_tools: dict[str, set[str]], task_of: Callable[[str], str]
              ) -> dict[str, dict[str, float]]:
    """Per task: episodes, the share whose first call is well formed (`well_formed`) and whose
    well-formed first call is one the oracle starts with (`oracle_first_tool`), and the copy
    rate of every call's argument words (`copy_rate`, over `argument_words`).

    `episodes` are records with "task" and "messages" (`launch.local` writes them); tasks
    without tool schemas in `tools` are left out.
    """
    counts: dict[str, list[int]] = {}
    for episode in episodes:
        task = task_of(episode["task"])
        if task not in tools:
            continue
        call = first_call(episode["messages"], tools[task])
        copied, words = copy_rate(episode["messages"])
        row = counts.setdefault(task, [0, 0, 0, 0, 0])
        row[0] += 1
        row[1] += call is not None
        row[2] += call is not None and call in first_tools.get(task, set())
        row[3] += copied
        row[4] += words
    return {task: {"episodes": n, "well_formed": good / n, "oracle_first_tool": right / n,
                   "copy_rate": copied / words if words else 0.0, "argument_words": words}
            for task, (n, good, right, copied, words) in sorted(counts.items())}
