"""Response bodies in OpenAI's shapes: chat completions, completions, and their streamed chunks.

Streaming, in the order and shapes OpenAI sends: a first chunk with the assistant role (sent as
soon as the request is accepted); then, as the engine reports a choice's tokens (at each host
sync, every `steps_per_sync` decode steps), a chunk with the text they settle
(`Service.settled_text`: nothing that a stop string or a tool call may still take back) and,
with `logprobs`, the log-probabilities of the tokens not reported yet; once the choice is done,
the rest of its content, one `tool_calls` delta per call (parsers need the whole text, so calls
come at the end), and a chunk with the finish reason; a last chunk without choices carrying
`usage` (with `stream_options.include_usage`) and the `agentrl` field, and `data: [DONE]`. The
deltas concatenate to the non-streamed message, and the log-probabilities to its own.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator, Sequence
from typing import Any

from agentrl_jax.sampling.types import SamplingParams, TokenEvent
from agentrl_jax.serving import errors
from agentrl_jax.serving.service import Choice, Outcome, Service

EXTENSION = "agentrl"  # the top-level field carrying the exact tokens


def new_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex}"


def sse(payload: dict[str, Any] | str) -> str:
    data = payload if isinstance(payload, str) else json.dumps(payload, ensure_ascii=False)
    return f"data: {data}\n\n"


def token_logprobs(service: Service, tokens: Sequence[int], logprobs: Sequence[float]
                    ) -> list[dict[str, Any]]:
    return [{"token": text, "logprob": lp, "bytes": list(text.encode("utf-8")),
             "top_logprobs": []}
            for text, lp in zip(service.token_texts(tokens), logprobs, strict=True)]


def chat_completion(service: Service, outcome: Outcome, model: str, logprobs: bool
                    ) -> dict[str, Any]:
    return {
        "id": new_id("chatcmpl"), "object": "chat.completion", "created": int(time.time()),
        "model": model, "system_fingerprint": None,
        "choices": [{"index": i, "message": c.message,
                     "logprobs": ({"content": token_logprobs(service, c.result.tokens,
                                                              c.result.logprobs)}
                                  if logprobs else None),
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


class StreamedChoice:
    """One choice of a stream as its tokens arrive: what it has sampled so far, and what of its
    text and log-probabilities the client has been sent."""

    def __init__(self, service: Service, params: SamplingParams, parse: bool):
        self.service, self.params, self.parse = service, params, parse
        self.tokens: list[int] = []
        self.logprobs: list[float] = []
        self.sent = ""  # text sent
        self.reported = 0  # tokens whose log-probabilities were sent
        self.rewound = False  # a restart replaced tokens already reported

    def add(self, event: TokenEvent) -> None:
        """Takes the engine's next tokens (`TokenEvent`: they replace the turn's from `start`)."""
        self.rewound = self.rewound or event.start < self.reported
        self.tokens[event.start:] = event.tokens
        self.logprobs[event.start:] = event.logprobs

    def delta(self) -> str:
        """The settled text not sent yet ('' if none), now counted as sent."""
        text = self.service.settled_text(self.tokens, self.params, self.parse)
        if len(text) <= len(self.sent) or not text.startswith(self.sent):
            return ""
        delta, self.sent = text[len(self.sent):], text
        return delta

    def unreported(self) -> tuple[list[int], list[float]]:
        """The tokens (and log-probabilities) not reported yet, now counted as reported."""
        lo, self.reported = self.reported, len(self.tokens)
        return self.tokens[lo:], self.logprobs[lo:]

    def rest(self, final: str) -> str | None:
        """What of the choice's `final` text is still to send, or None if what was sent does
        not begin it: a weight update restarted the turn after part of it was sent
        (`EngineConfig.in_flight="abort"`), or the tokenizer's text of a token prefix was not a
        beginning of the whole. A stream cannot take text back, so it ends with an error."""
        if self.rewound or not final.startswith(self.sent):
            return None
        return final[len(self.sent):]


class _Stream:
    """The chunks of a streamed response, by what the route's choices look like."""

    logprobs = False
    include_usage = False

    def opening(self, n: int) -> str:
        return ""

    def chunk(self, choices: list[dict[str, Any]], **extra: Any) -> str:
        raise NotImplementedError

    def _text_choice(self, index: int, text: str, logprobs: Any) -> dict[str, Any]:
        raise NotImplementedError

    def _finish_choice(self, index: int, finish_reason: str) -> dict[str, Any]:
        raise NotImplementedError

    def _final_text(self, choice: Choice) -> str:
        return choice.text

    def _calls(self, choice: Choice) -> list[dict[str, Any]]:
        return []

    def _lp(self, service: Service, tokens: list[int], logprobs: list[float]) -> Any:
        return {"content": token_logprobs(service, tokens, logprobs)} if self.logprobs else None

    def progress(self, service: Service, index: int, choice: StreamedChoice) -> str:
        """The chunk of choice `index`'s newly settled text ('' if nothing is settled)."""
        delta = choice.delta()
        if not delta:
            return ""
        return self.chunk([self._text_choice(index, delta, self._lp(service,
                                                                    *choice.unreported()))])

    def ending(self, service: Service, outcome: Outcome, streamed: Sequence[StreamedChoice]
               ) -> Iterator[str]:
        """The chunks once every choice is sampled: each one's rest and tool calls and its
        finish, then usage, the `agentrl` field and [DONE]; an error event instead if a
        choice's text no longer begins with what was sent (`StreamedChoice.rest`)."""
        rests = [s.rest(self._final_text(c)) for c, s in zip(outcome.choices, streamed,
                                                              strict=True)]
        if any(r is None for r in rests):
            yield sse(errors.stream_diverged().body())
            return
        for i, (c, s, rest) in enumerate(zip(outcome.choices, streamed, rests, strict=True)):
            tokens, logprobs = s.unreported()
            lp = self._lp(service, tokens, logprobs) if tokens else None
            calls = self._calls(c)
            if rest or (lp is not None and not calls):
                yield self.chunk([self._text_choice(i, rest or "", lp)])
                lp = None
            for k, call in enumerate(calls):
                yield self.chunk([{"index": i, "delta": {"tool_calls": [{"index": k, **call}]},
                                   "logprobs": lp, "finish_reason": None}])
                lp = None
            yield self.chunk([self._finish_choice(i, c.finish_reason)])
        usage = {"usage": outcome.usage} if self.include_usage else {}
        yield self.chunk([], **usage, **{EXTENSION: outcome.extension()})
        yield sse("[DONE]")


class ChatStream(_Stream):
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

    def _text_choice(self, index: int, text: str, logprobs: Any) -> dict[str, Any]:
        return {"index": index, "delta": {"content": text}, "logprobs": logprobs,
                "finish_reason": None}

    def _finish_choice(self, index: int, finish_reason: str) -> dict[str, Any]:
        return {"index": index, "delta": {}, "logprobs": None, "finish_reason": finish_reason}

    def _final_text(self, choice: Choice) -> str:
        assert choice.message is not None, "a chat choice has a message"
        return choice.message.get("content") or ""

    def _calls(self, choice: Choice) -> list[dict[str, Any]]:
        assert choice.message is not None, "a chat choice has a message"
        return list(choice.message.get("tool_calls") or [])


class CompletionStream(_Stream):
    """The chunks of a streamed completion (log-probabilities are not streamed)."""

    def __init__(self, model: str, include_usage: bool):
        self.id, self.created = new_id("cmpl"), int(time.time())
        self.model, self.include_usage = model, include_usage

    def chunk(self, choices: list[dict[str, Any]], **extra: Any) -> str:
        return sse({"id": self.id, "object": "text_completion", "created": self.created,
                    "model": self.model, "choices": choices, **extra})

    def _text_choice(self, index: int, text: str, logprobs: Any) -> dict[str, Any]:
        return {"index": index, "text": text, "logprobs": None, "finish_reason": None}

    def _finish_choice(self, index: int, finish_reason: str) -> dict[str, Any]:
        return {"index": index, "text": "", "logprobs": None, "finish_reason": finish_reason}
