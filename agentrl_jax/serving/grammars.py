"""The grammar a chat request's answer must follow, from its tools, `tool_choice`,
`parallel_tool_calls` and `response_format`; None when nothing constrains it.

The grammar is in llguidance's Lark syntax (`sampling.constraint.GrammarCompiler.lark`), over
the text the policy writes, in its tool-call format. Only the Hermes format is constrained
(`<tool_call>\\n{"name": ..., "arguments": {...}}\\n</tool_call>`, calls one per line):

  tool_choice "required"     one or more calls (one with parallel_tool_calls false)
  tool_choice {function}     one call of that function
  tool_choice "auto"         an answer, or any text and then calls; "<tool_call>" opens a call
                             that must be well formed, so an answer never contains it (with a
                             JSON answer, the text before calls does not begin with "{"). Built
                             only when something else constrains: a strict tool, parallel
                             calls off, or a response_format
  tool_choice "none"         tools play no part

A call's arguments follow the function's JSON schema when the function is `strict` or the
call is forced; otherwise they are any JSON object. The answer is any text, or with
`response_format` a JSON document (`json_object`: any object; `json_schema`: valid under it).
JSON is written as `json.dumps` writes it (", " and ": "), as the chat templates render calls.
The tags are written as the tokenizer has them (`GrammarCompiler.literal`): a vocabulary that
holds `<tool_call>` as one token gets that token, which no free text can contain.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

from agentrl_jax.serving import errors

# The formats whose calls a grammar can describe: the Hermes tags around one JSON object.
HERMES_PARSERS = ("hermes", "qwen25")
_JSON_STYLE = {"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": "}
# Text that does not contain an opening tag (llguidance's regex intersection and negation).
_NO_CALL = r"/(?s:.*)/ & ~/(?s:.*)<tool_call>(?s:.*)/"


def _json(schema: dict[str, Any]) -> str:
    return "%json " + json.dumps({**schema, "x-guidance": _JSON_STYLE})


def _call_schema(function: dict[str, Any], exact: bool) -> dict[str, Any]:
    arguments = function.get("parameters") or {"type": "object", "properties": {}}
    return {"type": "object", "additionalProperties": False, "required": ["name", "arguments"],
            "properties": {"name": {"const": function["name"]},
                           "arguments": arguments if exact else {"type": "object"}}}


def _answer(response_format: dict[str, Any] | None) -> str | None:
    """The answer's rule body for `response_format`, or None for free text."""
    kind = (response_format or {}).get("type", "text")
    if kind == "text":
        return None
    if kind == "json_object":
        return _json({"type": "object"})
    if kind == "json_schema":
        spec = response_format.get("json_schema") if response_format else None
        if not isinstance(spec, dict) or not isinstance(spec.get("schema", {}), dict):
            raise errors.bad_request("response_format json_schema needs json_schema.schema, "
                                     "a JSON schema object", param="response_format")
        return _json(spec.get("schema") or {})
    raise errors.bad_request(f"response_format type {kind!r}: 'text', 'json_object' or "
                             "'json_schema'", param="response_format")


def chosen_function(tool_choice: str | dict[str, Any] | None) -> str | None:
    """The function a `{"type": "function", "function": {"name": ...}}` choice names."""
    if isinstance(tool_choice, dict):
        name = (tool_choice.get("function") or {}).get("name")
        if tool_choice.get("type") != "function" or not isinstance(name, str):
            raise errors.bad_request("tool_choice: 'auto', 'none', 'required' or {'type': "
                                     "'function', 'function': {'name': NAME}}",
                                     param="tool_choice")
        return name
    if tool_choice not in (None, "auto", "none", "required"):
        raise errors.bad_request(f"tool_choice {tool_choice!r}: 'auto', 'none', 'required' or "
                                 "a function", param="tool_choice")
    return None


def request_grammar(parser: str, tools: Sequence[dict[str, Any]] | None,
                    tool_choice: str | dict[str, Any] | None, parallel_tool_calls: bool | None,
                    response_format: dict[str, Any] | None,
                    literal: Callable[[str], str] = json.dumps) -> str | None:
    """The Lark grammar of a chat request's answer (the module docstring), or None.

    `tools` are the request's function tools as the templates take them
    ({"type": "function", "function": {...}}); `literal(text)` writes a tag as the tokenizer
    has it (`GrammarCompiler.literal`). 400 for a choice naming no tool, and for a constraint
    on tool calls in a format other than Hermes.
    """
    answer = _answer(response_format)
    functions = [t["function"] for t in tools or []] if tool_choice != "none" else []
    named = chosen_function(tool_choice)
    if named is not None and named not in {f["name"] for f in functions}:
        raise errors.bad_request(f"tool_choice names {named!r}, which is not among the tools",
                                 param="tool_choice")
    forced = tool_choice == "required" or named is not None
    calls_constrained = functions and (forced or parallel_tool_calls is False
                                       or any(f.get("strict") for f in functions))
    if not calls_constrained:
        return None if answer is None else f"start: {answer}\n"
    if parser not in HERMES_PARSERS:
        raise errors.unsupported("tool_choice" if forced else "tools", "constrained tool calls "
                                 f"are served in the Hermes format, not {parser!r}'s")
    if named is not None:
        functions = [f for f in functions if f["name"] == named]
    schemas = [_call_schema(f, exact=forced or bool(f.get("strict"))) for f in functions]
    one_call = named is not None or parallel_tool_calls is False
    more = "" if one_call else ' ("\\n" call)*'
    open_tag, close_tag = literal("<tool_call>"), literal("</tool_call>")
    lines = [
        f"call: {open_tag} call_body",
        f'call_body: "\\n" call_json "\\n" {close_tag}',
        "call_json: " + _json({"anyOf": schemas} if len(schemas) > 1 else schemas[0]),
    ]
    if forced:
        lines.insert(0, f"start: call{more}")
    else:
        # Text before calls; beside a JSON answer it cannot begin with "{" (llguidance's
        # lexer could not tell the two apart, and the JSON answer would be lost).
        text = "/(?s:.*)/" if answer is None else "/([^{](?s:.*))?/"
        if open_tag.startswith("<["):   # a token: no text contains it
            lines[:0] = [f"start: answer | TEXT call{more}",
                         f"answer: {answer or '/(?s:.*)/'}", f"TEXT: {text}"]
        else:   # an answer, or text up to the first opening tag and then calls
            lines[:0] = [f"start: answer | lead call_body{more}",
                         f"answer: {answer or 'ANSWER'}",
                         f"lead[lazy]: TEXT {open_tag}", f"TEXT: {text}"]
            if answer is None:
                lines.append(f"ANSWER: {_NO_CALL}")
    return "\n".join(lines) + "\n"
