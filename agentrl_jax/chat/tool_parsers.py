"""Parsing tool calls out of sampled assistant text into OpenAI `tool_calls`.

A parser turns the decoded text of one assistant turn into either a `ParsedTurn` (the content
outside the calls plus OpenAI-format tool calls) or a `ToolParseError` describing what was
malformed. Parsers never raise on model output: a bad turn is data for the reward (AgentRL's
`agent validation failed`), not a crash of the episode.

Formats:
  hermes / qwen25  `<tool_call>{"name": ..., "arguments": {...}}</tool_call>`, any number per
                   turn; the body may also be a JSON list of such objects (SmolLM2's habit).
  glm4             GLM-4-0414: after `<|assistant|>` the model writes a function name on its own
                   line followed by a JSON arguments object (`get_weather\n{"city": "Paris"}`);
                   several calls are separated by `<|assistant|>`, and the turn ends with
                   `<|observation|>`. Plain content instead starts with a newline.
"""

from __future__ import annotations

import dataclasses
import json
import re
from typing import Any, Literal, Protocol

ErrorKind = Literal[
    "bad_json",  # the call body is not valid JSON
    "invalid_call",  # valid JSON, but not an object (or list of objects) describing a call
    "missing_name",  # no non-empty string "name"
    "arguments_not_object",  # "arguments" missing, or not a JSON object
    "unclosed_tag",  # an opening tag without its closing tag
    "unexpected_tag",  # a closing tag without an opening one
]


@dataclasses.dataclass(frozen=True)
class ToolParseError:
    """Why an assistant turn could not be parsed; `raw` is the whole turn's text."""

    kind: ErrorKind
    message: str
    raw: str


@dataclasses.dataclass(frozen=True)
class ParsedTurn:
    """A parsed assistant turn: text outside tool calls and OpenAI-format `tool_calls`."""

    content: str
    tool_calls: tuple[dict[str, Any], ...] = ()

    def message(self) -> dict[str, Any]:
        """The OpenAI chat-completions assistant message."""
        message: dict[str, Any] = {"role": "assistant", "content": self.content}
        if self.tool_calls:
            message["tool_calls"] = [dict(call) for call in self.tool_calls]
        return message


ParseResult = ParsedTurn | ToolParseError


class ToolCallParser(Protocol):
    """Parses one assistant turn's decoded text."""

    def parse(self, text: str) -> ParseResult: ...


def partial_marker(text: str, marker: str) -> int:
    """Length of the longest end of `text` that is a proper beginning of `marker` (0 if none):
    what a stream must hold back while the next tokens may complete the marker."""
    for k in range(min(len(marker) - 1, len(text)), 0, -1):
        if text.endswith(marker[:k]):
            return k
    return 0


def settled_content(parser: ToolCallParser, text: str) -> str:
    """The beginning of a turn still being sampled that its content will start with however it
    goes on: a prefix P of `text` such that, for every continuation `rest`, both `text + rest`
    and, when `parse(text + rest)` is a `ParsedTurn`, its `content` begin with P. A server may
    stream P as content before the turn ends. A parser says so with a `settled` method; for one
    without, nothing is settled until the turn ends."""
    settled = getattr(parser, "settled", None)
    return settled(text) if settled is not None else ""


class _Invalid(Exception):
    """Internal: carries an error kind up to `parse`, which turns it into a `ToolParseError`."""

    def __init__(self, kind: ErrorKind, message: str):
        super().__init__(message)
        self.kind = kind


def _openai_tool_calls(calls: list[tuple[str, dict[str, Any]]]) -> tuple[dict[str, Any], ...]:
    return tuple(
        {
            "id": str(i),
            "type": "function",
            "function": {"name": name, "arguments": json.dumps(args, ensure_ascii=False)},
        }
        for i, (name, args) in enumerate(calls)
    )


MAX_NESTING = 64  # lists and objects inside one another in one call; workers refuse deeper


def _loads(text: str) -> Any:
    try:
        return _sendable(json.loads(text))
    except (ValueError, RecursionError) as e:  # RecursionError: absurdly deep nesting
        raise _Invalid("bad_json", f"invalid JSON: {e}") from None


def _sendable(value: Any) -> Any:
    """`value` if it can travel as UTF-8 JSON: no lone surrogate (`"\\ud800"` parses to one,
    UTF-8 cannot encode it) and at most MAX_NESTING levels deep; else `_Invalid`."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, (list, dict)):
            if depth > MAX_NESTING:
                raise _Invalid("bad_json", f"JSON nested deeper than {MAX_NESTING} levels")
            stack.extend((child, depth + 1) for child in
                         (item if isinstance(item, list) else [*item, *item.values()]))
        elif isinstance(item, str):
            try:
                item.encode("utf-8")
            except UnicodeEncodeError:
                raise _Invalid("bad_json", "JSON text holds a lone surrogate") from None
    return value


def _arguments_object(args: Any) -> dict[str, Any]:
    """`args` as a dict; a JSON string holding an object is accepted too (OpenAI style)."""
    if isinstance(args, str):
        try:
            args = json.loads(args)
        except (ValueError, RecursionError):
            raise _Invalid("arguments_not_object", "arguments string is not JSON") from None
        _sendable(args)
    if not isinstance(args, dict):
        raise _Invalid("arguments_not_object", f"arguments must be an object, got {args!r:.80}")
    return args


def _call_from_json(obj: Any) -> tuple[str, dict[str, Any]]:
    if not isinstance(obj, dict):
        raise _Invalid("invalid_call", f"a tool call must be a JSON object, got {obj!r:.80}")
    name = obj.get("name")
    if not isinstance(name, str) or not name.strip():
        raise _Invalid("missing_name", "tool call has no function name")
    if "arguments" in obj:
        args = obj["arguments"]
    elif "parameters" in obj:  # Llama-3-style alias some models emit
        args = obj["parameters"]
    else:
        raise _Invalid("arguments_not_object", f"tool call {name!r} has no arguments")
    return name.strip(), _arguments_object(args)


class HermesParser:
    """`<tool_call>{"name": ..., "arguments": {...}}</tool_call>`: Hermes, Qwen2.5, SmolLM2."""

    open_tag = "<tool_call>"
    close_tag = "</tool_call>"

    def parse(self, text: str) -> ParseResult:
        try:
            return self._parse(text)
        except _Invalid as e:
            return ToolParseError(kind=e.kind, message=str(e), raw=text)

    def _parse(self, text: str) -> ParsedTurn:
        content: list[str] = []
        calls: list[tuple[str, dict[str, Any]]] = []
        pos = 0
        while True:
            start = text.find(self.open_tag, pos)
            close = text.find(self.close_tag, pos)
            if close != -1 and (start == -1 or close < start):
                raise _Invalid("unexpected_tag", f"{self.close_tag} without {self.open_tag}")
            if start == -1:
                content.append(text[pos:])
                break
            content.append(text[pos:start])
            body_start = start + len(self.open_tag)
            end = text.find(self.close_tag, body_start)
            nested = text.find(self.open_tag, body_start)
            if end == -1 or (nested != -1 and nested < end):
                raise _Invalid("unclosed_tag", f"{self.open_tag} without {self.close_tag}")
            body = _loads(text[body_start:end])
            if body == []:
                raise _Invalid("invalid_call", "empty list of tool calls")
            for obj in body if isinstance(body, list) else [body]:
                calls.append(_call_from_json(obj))
            pos = end + len(self.close_tag)
        # Pieces around calls are joined by single newlines, whatever spacing surrounded the tags.
        content_text = "\n".join(piece.strip() for piece in content if piece.strip())
        return ParsedTurn(content=content_text, tool_calls=_openai_tool_calls(calls))

    def settled(self, text: str) -> str:
        """`settled_content`: the text before the first call's opening tag (or before an end
        that may begin one), without its trailing whitespace, which `parse` strips when a call
        follows; nothing while the turn starts with whitespace, which `parse` strips when the
        turn has calls and keeps when it has none."""
        if not text or text[0].isspace():
            return ""
        cut = text.find(self.open_tag)
        if cut == -1:
            cut = len(text) - partial_marker(text, self.open_tag)
        return text[:cut].rstrip()


_FUNCTION_NAME = re.compile(r"[A-Za-z_][\w.\-]*")


class Glm4Parser:
    """GLM-4-0414: `name\\n{json arguments}` segments separated by `<|assistant|>`."""

    separator = "<|assistant|>"
    # Role tokens that end an assistant turn; the sampler may or may not include them.
    end_markers = ("<|observation|>", "<|user|>", "<|endoftext|>")

    def parse(self, text: str) -> ParseResult:
        try:
            return self._parse(text)
        except _Invalid as e:
            return ToolParseError(kind=e.kind, message=str(e), raw=text)

    def _parse(self, text: str) -> ParsedTurn:
        cleaned = text
        for marker in self.end_markers:
            cleaned = cleaned.replace(marker, "")
        content: list[str] = []
        calls: list[tuple[str, dict[str, Any]]] = []
        for segment in cleaned.split(self.separator):
            call = self._segment_call(segment)
            if call is None:
                content.append(segment.strip())
            else:
                name, args, trailing = call
                calls.append((name, args))
                content.append(trailing)
        return ParsedTurn(
            content="\n".join(c for c in content if c), tool_calls=_openai_tool_calls(calls)
        )

    def settled(self, text: str) -> str:
        """`settled_content`: nothing. A turn not starting with whitespace may be a call from its
        first character, and one that does keeps that whitespace as plain content but loses it
        in `parse`'s content once a call follows, so no prefix is safe before the turn ends."""
        return ""

    def _segment_call(self, segment: str) -> tuple[str, dict[str, Any], str] | None:
        """(name, arguments, trailing text) if `segment` is a call, None if it is content."""
        if not segment or segment[0].isspace():  # content is written after a newline
            return None
        first, newline, rest = segment.partition("\n")
        if first.lstrip().startswith("{"):
            raise _Invalid("missing_name", "arguments object without a function name line")
        name, body = first.strip(), rest.lstrip()
        if not newline or not _FUNCTION_NAME.fullmatch(name) or body[:1] not in ("{", "["):
            return None
        try:
            args, end = json.JSONDecoder().raw_decode(body)
        except (ValueError, RecursionError) as e:
            raise _Invalid("bad_json", f"invalid JSON arguments for {name!r}: {e}") from None
        _sendable(args)
        return name, _arguments_object(args), body[end:].strip()


_PARSERS: dict[str, type] = {"hermes": HermesParser, "qwen25": HermesParser, "glm4": Glm4Parser}


def get_parser(name: str) -> ToolCallParser:
    """A tool-call parser by format name: `hermes`, `qwen25` or `glm4`."""
    try:
        return _PARSERS[name]()
    except KeyError:
        raise ValueError(f"unknown tool parser {name!r}; known: {', '.join(_PARSERS)}") from None
