"""Demonstrations (OpenAI-format episodes, e.g. oracle exports) as trainable token streams.

A demonstration is tokenised exactly as the agent loop would have produced it (through
`chat.Conversation`): the opening messages render as the prompt; each assistant message becomes
the ids the policy would have had to sample, i.e. its Hermes text plus the end-of-turn token
(loss mask 1); the environment's replies append as template deltas (mask 0). So what SFT teaches
is, token for token, what RL later samples and trains on.

Demonstration record (`environments.oracle --export` writes these, one JSON object per line):
    {"task": "db-train", "index": 17, "messages": [...], "tools": [...], "reward": 1.0}
"""

from __future__ import annotations

import json
import pathlib
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import numpy as np

from agentrl_jax.chat.conversation import Conversation
from agentrl_jax.chat.templates import hermes_tool_call_text, hermes_tools_block
from agentrl_jax.rl.batch import Trajectory

Demo = dict[str, Any]
# The version of what `demo_texts` yields, part of the warm start's cache key: a scratch
# tokenizer is trained on those texts, so a change to them is a different policy.
TEXTS_FORMAT = 2


def read_demos(paths: Iterable[str | pathlib.Path]) -> Iterator[Demo]:
    """Yields the records of JSONL demonstration files, in order."""
    for path in paths:
        with open(path) as f:
            for line in f:
                if line.strip():
                    yield json.loads(line)


def assistant_text(message: dict[str, Any]) -> str:
    """What the policy writes for an assistant message: content, then Hermes tool calls."""
    parts = [message.get("content") or ""]
    parts += [hermes_tool_call_text(call) for call in message.get("tool_calls") or []]
    return "\n".join(p for p in parts if p)


def demo_conversation(tokenizer: Any, demo: Demo,
                      end_of_turn_ids: Sequence[int] | None = None) -> Conversation:
    """The demonstration replayed through a `Conversation` (assistant turns as if sampled)."""
    messages = demo["messages"]
    first = next((i for i, m in enumerate(messages) if m["role"] == "assistant"), None)
    if first is None:
        raise ValueError("a demonstration needs at least one assistant message")
    conv = Conversation(tokenizer, messages[:first], demo.get("tools"),
                        end_of_turn_ids=end_of_turn_ids)
    eot = conv.end_of_turn_ids[0]
    i = first
    while i < len(messages):
        ids = tokenizer.encode(assistant_text(messages[i]), add_special_tokens=False)
        conv.append_assistant([*ids, eot])
        j = i + 1
        while j < len(messages) and messages[j]["role"] != "assistant":
            j += 1
        if j > i + 1:
            conv.append_messages(messages[i + 1 : j])
        elif j < len(messages):
            raise ValueError(f"two assistant messages in a row at message {i}")
        i = j
    return conv


def demo_trajectory(tokenizer: Any, demo: Demo, end_of_turn_ids: Sequence[int] | None = None,
                    context_weight: float = 0.0) -> Trajectory:
    """The demonstration as a `Trajectory`: loss weight 1 on the assistant's tokens and
    `context_weight` on every other token (prompt, tools, the environment's replies).

    A positive `context_weight` adds a language-modelling term on the context at no extra
    compute (the forward and backward pass cover those tokens anyway): the observations repeat
    the names, lists and JSON that actions copy, which is what a small model trained from
    scratch is short of (issue #17, docs/warm_start.md).
    """
    if not 0.0 <= context_weight <= 1.0:
        raise ValueError(f"context_weight must be in [0, 1], got {context_weight}")
    conv = demo_conversation(tokenizer, demo, end_of_turn_ids)
    tokens = conv.tokens
    assistant = conv.loss_mask.astype(np.float32)
    return Trajectory(tokens=tokens, loss_mask=assistant + context_weight * (1.0 - assistant),
                      behaviour_logprobs=np.zeros(len(tokens), np.float32), advantage=1.0)


def demo_texts(demos: Iterable[Demo]) -> Iterator[str]:
    """Every piece of text a tokenizer should learn from: the tools as the prompt lists them
    (inside the Hermes preamble, which opens every episode), prompts, replies, calls."""
    for demo in demos:
        if demo.get("tools"):
            yield hermes_tools_block(demo["tools"])
        for message in demo["messages"]:
            yield (assistant_text(message) if message["role"] == "assistant"
                   else message.get("content") or "")
