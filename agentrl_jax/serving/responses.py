"""Response bodies in OpenAI's shapes: chat completions, completions, and their streamed chunks.

Streaming: the engine hands back a whole turn, so the chunks are written once a choice is
sampled, in the order and shape OpenAI sends them: a first chunk with the assistant role (sent
as soon as the request is accepted), one chunk per sampled token with its text delta (and its
log-probability with `logprobs`), or, when the turn parsed into tool calls, one content delta and
one `tool_calls` delta per call; then a chunk with the finish reason, a last chunk without
choices carrying `usage` (with `stream_options.include_usage`) and the `agentrl` field, and
`data: [DONE]`. The deltas concatenate to the non-streamed message.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from typing import Any

from agentrl_jax.serving.service import Choice, Outcome, Service

EXTENSION = "agentrl"  # the top-level field carrying the exact tokens


def new_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex}"


def sse(payload: dict[str, Any] | str) -> str:
    data = payload if isinstance(payload, str) else json.dumps(payload, ensure_ascii=False)
    return f"data: {data}\n\n"


def _token_logprobs(service: Service, choice: Choice, lo: int = 0, hi: int | None = None
                    ) -> list[dict[str, Any]]:
    tokens, logprobs = choice.result.tokens[lo:hi], choice.result.logprobs[lo:hi]
    return [{"token": text, "logprob": lp, "bytes": list(text.encode("utf-8")),
             "top_logprobs": []}
            for text, lp in zip(service.token_texts(tokens), logprobs, strict=True)]


def chat_completion(service: Service, outcome: Outcome, model: str, logprobs: bool
                    ) -> dict[str, Any]:
    return {
        "id": new_id("chatcmpl"), "object": "chat.completion", "created": int(time.time()),
        "model": model, "system_fingerprint": None,
        "choices": [{"index": i, "message": c.message,
                     "logprobs": {"content": _token_logprobs(service, c)} if logprobs else None,
                     "finish_reason": c.finish_reason}
                    for i, c in enumerate(outcome.choices)],
        "usage": outcome.usage, EXTENSION: outcome.extension(),
    }


def completion(service: Service, outcome: Outcome, model: str, logprobs: bool
               ) -> dict[str, Any]:
    choices = []
    for i, c in enumerate(outcome.choices):
        lp = None
        if logprobs:
            texts = service.token_texts(c.result.tokens)
            offsets = [sum(len(t) for t in texts[:k]) for k in range(len(texts))]
            lp = {"tokens": texts, "token_logprobs": list(c.result.logprobs),
                  "top_logprobs": None, "text_offset": offsets}
        choices.append({"index": i, "text": c.text, "logprobs": lp,
                        "finish_reason": c.finish_reason})
    return {"id": new_id("cmpl"), "object": "text_completion", "created": int(time.time()),
            "model": model, "choices": choices, "usage": outcome.usage,
            EXTENSION: outcome.extension()}


def _pieces(service: Service, choice: Choice) -> list[str]:
    """Per sampled token, the text it adds to `choice.text` (empty past a stop string or for
    the end-of-turn token); they concatenate to `choice.text`."""
    tokens = choice.result.tokens
    pieces, previous = [], ""
    for k in range(1, len(tokens) + 1):
        body = tokens[:k]
        if body[-1] in service.end_of_turn_ids:
            body = body[:-1]
        text = service.tokenizer.decode(body, skip_special_tokens=False)
        if text.endswith("\ufffd"):  # a character split over tokens: wait for the rest
            pieces.append("")
            continue
        text = text[: len(choice.text)]
        pieces.append(text[len(previous):] if text.startswith(previous) else "")
        previous = text if text.startswith(previous) else previous
    if pieces and previous != choice.text:
        pieces[-1] += choice.text[len(previous):]
    return pieces


class ChatStream:
    """The chunks of a streamed chat completion."""

    def __init__(self, model: str, logprobs: bool, include_usage: bool):
        self.id, self.created = new_id("chatcmpl"), int(time.time())
        self.model, self.logprobs, self.include_usage = model, logprobs, include_usage

    def chunk(self, choices: list[dict[str, Any]], **extra: Any) -> str:
        return sse({"id": self.id, "object": "chat.completion.chunk", "created": self.created,
                    "model": self.model, "system_fingerprint": None, "choices": choices,
                    **extra})

    def opening(self, n: int) -> str:
        return "".join(self.chunk([{"index": i, "delta": {"role": "assistant", "content": ""},
                                    "logprobs": None, "finish_reason": None}])
                       for i in range(n))

    def body(self, service: Service, outcome: Outcome) -> Iterator[str]:
        for i, c in enumerate(outcome.choices):
            assert c.message is not None, "a chat choice has a message"
            calls = c.message.get("tool_calls")
            if calls:
                lp = {"content": _token_logprobs(service, c)} if self.logprobs else None
                if c.message.get("content"):
                    yield self.chunk([{"index": i, "delta": {"content": c.message["content"]},
                                       "logprobs": lp, "finish_reason": None}])
                    lp = None
                for k, call in enumerate(calls):
                    yield self.chunk([{"index": i, "delta": {"tool_calls": [{"index": k, **call}]},
                                       "logprobs": lp, "finish_reason": None}])
                    lp = None
            else:
                for k, piece in enumerate(_pieces(service, c)):
                    lp = ({"content": _token_logprobs(service, c, k, k + 1)}
                          if self.logprobs else None)
                    yield self.chunk([{"index": i, "delta": {"content": piece}, "logprobs": lp,
                                       "finish_reason": None}])
            yield self.chunk([{"index": i, "delta": {}, "logprobs": None,
                               "finish_reason": c.finish_reason}])
        usage = {"usage": outcome.usage} if self.include_usage else {}
        yield self.chunk([], **usage, **{EXTENSION: outcome.extension()})
        yield sse("[DONE]")


class CompletionStream:
    """The chunks of a streamed completion."""

    def __init__(self, model: str, include_usage: bool):
        self.id, self.created = new_id("cmpl"), int(time.time())
        self.model, self.include_usage = model, include_usage

    def chunk(self, choices: list[dict[str, Any]], **extra: Any) -> str:
        return sse({"id": self.id, "object": "text_completion", "created": self.created,
                    "model": self.model, "choices": choices, **extra})

    def opening(self, n: int) -> str:
        return ""

    def body(self, service: Service, outcome: Outcome) -> Iterator[str]:
        for i, c in enumerate(outcome.choices):
            for piece in _pieces(service, c):
                yield self.chunk([{"index": i, "text": piece, "logprobs": None,
                                   "finish_reason": None}])
            yield self.chunk([{"index": i, "text": "", "logprobs": None,
                               "finish_reason": c.finish_reason}])
        usage = {"usage": outcome.usage} if self.include_usage else {}
        yield self.chunk([], **usage, **{EXTENSION: outcome.extension()})
        yield sse("[DONE]")
