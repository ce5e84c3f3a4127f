"""Swapped demonstrations: the rare words the calls copy are replaced consistently through the
episode, by words of the same task and shape; the task's closed vocabulary, the system prompt
and the tools stay; the choice is seeded."""

import json
import random

import pytest

from agentrl_jax.evaluation.first_call import copy_rate
from agentrl_jax.sft import copy_swap

TOOLS = [{"type": "function", "function": {
    "name": "take_action", "description": "act in the room",
    "parameters": {"type": "object", "properties": {"action": {"type": "string"}},
                   "required": ["action"]}}}]


def call(action: str) -> dict:
    return {"role": "assistant", "content": "", "tool_calls": [{"id": "0", "type": "function",
            "function": {"name": "take_action", "arguments": json.dumps({"action": action})}}]}


def room(thing: str, place: str, task: str = "house") -> dict:
    return {"task": task, "tools": TOOLS, "messages": [
        {"role": "system", "content": "Solve the task; help lists the actions."},
        {"role": "user", "content": f"You see a {place} 1. Your task is to: find the {thing}. "
                                    f"AVAILABLE ACTIONS: go to {place} 1\nhelp"},
        call(f"go to {place} 1"),
        {"role": "tool", "content": f"On the {place} 1, you see a {thing} 2. AVAILABLE "
                                    f"ACTIONS: take {thing} 2 from {place} 1\nhelp"},
        call(f"take {thing} 2 from {place} 1"),
        {"role": "tool", "content": "Done."}]}


# "drawer" is in every demonstration (the closed vocabulary); each thing is in one.
DEMOS = [room(t, "drawer") for t in ("apple", "mug", "pen", "egg", "cup", "key", "box")]


def test_copied_words_are_the_call_words_seen_earlier_less_the_system_prompts():
    assert copy_swap.copied_words(DEMOS[0]) == {"go", "to", "drawer", "take", "apple", "from"}
    closed = copy_swap.closed_vocabularies(DEMOS)["house"]
    assert {"go", "to", "drawer", "take", "from"} <= closed and "apple" not in closed
    assert copy_swap.task_vocabularies(DEMOS) == {
        "house": ["apple", "box", "cup", "egg", "key", "mug", "pen"]}


def test_a_swap_replaces_the_rare_copied_words_everywhere_and_keeps_the_rest():
    closed = copy_swap.closed_vocabularies(DEMOS)["house"]
    vocabulary = copy_swap.task_vocabularies(DEMOS)["house"]
    out = copy_swap.swapped(DEMOS[0], vocabulary, random.Random(0), closed)
    new = json.loads(out["messages"][4]["tool_calls"][0]["function"]["arguments"])["action"]
    verb, thing, number, rest = new.split(" ", 3)
    assert (verb, number, rest) == ("take", "2", "from drawer 1")
    assert thing in vocabulary and thing != "apple"
    text = json.dumps(out)
    assert "apple" not in text and f"find the {thing}" in out["messages"][1]["content"]
    assert f"you see a {thing} 2" in out["messages"][3]["content"]
    assert out["messages"][0] == DEMOS[0]["messages"][0] and out["tools"] == TOOLS
    # The call still copies every word from the context, and the input is untouched.
    assert copy_rate(out["messages"]) == copy_rate(DEMOS[0]["messages"])
    assert "apple" in json.dumps(DEMOS[0])


def test_replacements_keep_the_words_shape_and_never_collide():
    demo = room("Bob", "drawer", task="t")
    assert copy_swap.shape("Ann") == copy_swap.shape("Bob")
    assert copy_swap.shape("lamp") != copy_swap.shape("Bob") != copy_swap.shape("x1")
    for seed in range(5):
        out = copy_swap.swapped(demo, ["x1", "Ann", "Eve", "lamp", "Bob"], random.Random(seed))
        words = json.dumps(out["messages"][1:])
        assert "Bob" not in words and ("Ann" in words or "Eve" in words)
    # No unused word of the shape: the word stays.
    out = copy_swap.swapped(demo, ["x1", "lamp"], random.Random(0), frozenset({"drawer"}))
    assert "Bob" in json.dumps(out)


def test_with_swaps_replaces_the_seeded_fraction_only():
    out = copy_swap.with_swaps(DEMOS, 3 / 7, seed=1)
    changed = [i for i, (a, b) in enumerate(zip(DEMOS, out, strict=True)) if a != b]
    assert len(changed) == 3
    assert copy_swap.with_swaps(DEMOS, 3 / 7, seed=1) == out       # seeded
    assert copy_swap.with_swaps(DEMOS, 0.0, seed=1) == DEMOS
    with pytest.raises(ValueError, match="in \\[0, 1\\]"):
        copy_swap.with_swaps(DEMOS, 1.5, seed=0)
