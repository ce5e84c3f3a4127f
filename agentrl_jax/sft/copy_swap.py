"""Demonstrations whose copied words are swapped for others, so that only copying predicts them.

A small model trained from scratch on a few hundred demonstrations learns their actions by
heart rather than reading them from the context: in validation it writes `go to dresser 1` in
kitchens and searches WebShop for words of other instructions (issue #17, docs/warm_start.md).
In a *swapped* demonstration every word that the assistant's calls copy from the environment
is replaced, everywhere in the conversation, by another word of the same task's copied
vocabulary of the same shape (letters only, capitalised, with digits or underscores). A copied
word is a word of a call's argument values (`evaluation.first_call.WORD`, at least one letter)
that occurs in an earlier user or tool message. Swapped are only a task's *rare* copied words:
those in fewer than `CLOSED_SHARE` of its demonstrations, and not in the system prompt or the
tool schemas. The words that recur across episodes are the task's closed vocabulary (ALFWorld's
verbs and common receptacles, KG's relations, WebShop's `buy now`), which a policy may know by
heart; the rare ones are the instance's entities, which it can only read. The episode stays
consistent (the observation lists `take mug 1 from shelf 2` and the action says the same), but
its entities are no longer the ones the demonstrations repeat.

`with_swaps(demos, fraction, seed)` replaces that fraction of the demonstrations (chosen by the
seed) with swapped copies, so the warm start's token budget is unchanged.
"""

from __future__ import annotations

import collections
import copy
import json
import random
import re
from collections.abc import Sequence
from typing import Any

from agentrl_jax.evaluation.first_call import WORD, call_arguments

Demo = dict[str, Any]

CLOSED_SHARE = 0.15  # a word in at least this share of a task's demonstrations is never swapped


def _is_swappable(word: str) -> bool:
    return any(c.isalpha() for c in word)


def _argument_words(call: dict[str, Any]) -> list[str]:
    """The words of a call's argument values (its parameter names are the schema's)."""
    arguments = call_arguments(call)
    if isinstance(arguments, dict):
        text = " ".join(json.dumps(v) if not isinstance(v, str) else v
                        for v in arguments.values())
    else:
        text = str(call.get("arguments", ""))
    return WORD.findall(text)


def protected_words(demo: Demo) -> set[str]:
    """Words of the system prompt and the tool schemas: verbs and names the task fixes."""
    text = " ".join(m.get("content") or "" for m in demo["messages"] if m["role"] == "system")
    return set(WORD.findall(text + " " + json.dumps(demo.get("tools") or [])))


def copied_words(demo: Demo) -> set[str]:
    """The words the demonstration's calls copy from earlier user or tool messages (less the
    system prompt's and the tools')."""
    seen: set[str] = set()
    copied: set[str] = set()
    for message in demo["messages"]:
        for tool_call in message.get("tool_calls") or []:
            copied.update(w for w in _argument_words(tool_call["function"]) if w in seen)
        if message["role"] in ("user", "tool"):
            seen.update(WORD.findall(message.get("content") or ""))
    return {w for w in copied if _is_swappable(w)} - protected_words(demo)


def shape(word: str) -> tuple[bool, bool, bool]:
    """What a replacement must share with the word: digits, a capital first letter, `_`."""
    return any(c.isdigit() for c in word), word[:1].isupper(), "_" in word


def all_words(demo: Demo) -> set[str]:
    words: set[str] = set()
    for message in demo["messages"]:
        words.update(WORD.findall(message.get("content") or ""))
        for tool_call in message.get("tool_calls") or []:
            words.update(WORD.findall(str(tool_call["function"].get("arguments", ""))))
    return words | protected_words(demo)


def swapped(demo: Demo, vocabulary: Sequence[str], rng: random.Random,
            closed: frozenset[str] = frozenset()) -> Demo:
    """`demo` with each copied word not in `closed` replaced by a distinct word of `vocabulary`
    of its shape that does not occur in the demonstration, in every user, tool and assistant
    message and call (the system prompt and the tools stay). Words are matched whole and
    case-sensitively; a word keeps its place when the vocabulary has no unused word left."""
    present = all_words(demo)
    unused: dict[tuple[bool, bool, bool], list[str]] = {}
    for word in vocabulary:
        if word not in present:
            unused.setdefault(shape(word), []).append(word)
    for words in unused.values():
        rng.shuffle(words)
    mapping = {}
    for word in sorted(copied_words(demo) - closed):
        pool = unused.get(shape(word))
        if pool:
            mapping[word] = pool.pop()
    if not mapping:
        return copy.deepcopy(demo)
    pattern = re.compile(r"(?<![A-Za-z0-9_])("
                         + "|".join(re.escape(w) for w in sorted(mapping, key=len, reverse=True))
                         + r")(?![A-Za-z0-9_])")

    def swap(text: str) -> str:
        return pattern.sub(lambda m: mapping[m.group(1)], text)

    out = copy.deepcopy(demo)
    for message in out["messages"]:
        if message["role"] == "system":
            continue
        if message.get("content"):
            message["content"] = swap(message["content"])
        for tool_call in message.get("tool_calls") or []:
            function = tool_call["function"]
            if isinstance(function.get("arguments"), str):
                function["arguments"] = swap(function["arguments"])
            elif isinstance(function.get("arguments"), dict):
                function["arguments"] = json.loads(swap(json.dumps(function["arguments"])))
    return out


def closed_vocabularies(demos: Sequence[Demo]) -> dict[str, frozenset[str]]:
    """Per task, the words in at least `CLOSED_SHARE` of its demonstrations."""
    counts: dict[str, collections.Counter] = {}
    totals: collections.Counter = collections.Counter()
    for demo in demos:
        task = demo.get("task", "")
        totals[task] += 1
        counts.setdefault(task, collections.Counter()).update(all_words(demo))
    return {task: frozenset(w for w, n in c.items() if n >= CLOSED_SHARE * totals[task])
            for task, c in counts.items()}


def task_vocabularies(demos: Sequence[Demo], closed: dict[str, frozenset[str]] | None = None
                      ) -> dict[str, list[str]]:
    """Per task, the sorted rare words its demonstrations copy: what swaps draw from.
    `closed`: `closed_vocabularies(demos)`, when the caller has it."""
    closed = closed_vocabularies(demos) if closed is None else closed
    vocabularies: dict[str, set[str]] = {}
    for demo in demos:
        task = demo.get("task", "")
        vocabularies.setdefault(task, set()).update(copied_words(demo) - closed[task])
    return {task: sorted(words) for task, words in vocabularies.items()}


def with_swaps(demos: Sequence[Demo], fraction: float, seed: int) -> list[Demo]:
    """`demos` with `round(fraction * len(demos))` of them, chosen by `seed`, swapped."""
    if not 0.0 <= fraction <= 1.0:
        raise ValueError(f"the swapped fraction must be in [0, 1], got {fraction}")
    rng = random.Random(seed)
    chosen = set(rng.sample(range(len(demos)), round(fraction * len(demos))))
    if not chosen:
        return list(demos)
    closed = closed_vocabularies(demos)
    vocabularies = task_vocabularies(demos, closed)
    out = []
    for i, demo in enumerate(demos):
        task = demo.get("task", "")
        out.append(swapped(demo, vocabularies[task], random.Random(f"{seed}/{i}"), closed[task])
                   if i in chosen else demo)
    return out
