"""OpenAI's Responses API (`POST /v1/responses`), served statelessly over the chat path.

A Responses request is translated into the chat-completions request it means and served by the
same `Service.prepare_chat` and engine, so it gets the same checks, the same rendering and the
same token-exact `agentrl` field and trajectories (`trajectory_id` or the `X-Trajectory-Id`
header). The translation:

    instructions                      -> a system message first
    input: "text"                     -> one user message
    {"role": ..., "content": ...}     -> that message (text parts joined; other parts refused)
    {"type": "function_call", ...}    -> a tool call of the assistant message before it (a new
                                         assistant message if the item before is not one)
    {"type": "function_call_output"}  -> a tool message answering `call_id`
    tools: [{"type": "function", "name", "parameters", "strict"}]  -> chat function tools
    tool_choice {"type": "function", "name"} -> chat's {"type": "function", "function": {...}}
    max_output_tokens                 -> max_completion_tokens
    text.format                       -> response_format

and the assistant message sampled becomes the output items: a `message` with one `output_text`
part (when it has text), then one `function_call` item per call, in order, so that a client
replaying them as input gets back the message the model produced.

Stateless: nothing is stored, so `previous_response_id` is refused (send the conversation as
`input`), as are reasoning and item-reference items, and parameters the chat path cannot honour
(it names them). Streaming sends the typed events, each `event: TYPE` with a `sequence_number`:
`response.created`, `response.in_progress`, the message's `output_item.added`,
`content_part.added`, `output_text.delta`s as text settles, `output_text.done`,
`content_part.done`, `output_item.done`, then per call `output_item.added`,
`function_call_arguments.delta`, `.done` and `output_item.done`, and `response.completed` (or
`response.incomplete` at the token limit) with the whole response.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator, Sequence
from typing import Any

from pydantic import ValidationError

from agentrl_jax.serving import errors, schemas
from agentrl_jax.serving.responses import EXTENSION, StreamedChoice, new_id, token_logprobs
from agentrl_jax.serving.schemas import ResponsesRequest
from agentrl_jax.serving.service import Outcome, Service

TEXT_PARTS = ("input_text", "output_text", "text")


def _text_of(content: Any, where: str) -> str | None:
    """A message item's content as text: a string, or its text parts joined."""
    if content is None or isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise errors.bad_request("content must be a string or a list of parts", param=where)
    texts = []
    for k, part in enumerate(content):
        kind = part.get("type") if isinstance(part, dict) else None
        if kind not in TEXT_PARTS or not isinstance(part.get("text"), str):
            raise errors.bad_request(f"content part of type {kind!r}: only text parts are "
                                     "served", param=f"{where}[{k}]")
        texts.append(part["text"])
    return "".join(texts)


def _messages(request: ResponsesRequest) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = []
    if request.instructions:
        messages.append({"role": "system", "content": request.instructions})
    if isinstance(request.input, str):
        return messages + [{"role": "user", "content": request.input}]
    for i, item in enumerate(request.input):
        where = f"input[{i}]"
        kind = item.get("type", "message" if "role" in item else None)
        if kind == "message":
            messages.append({"role": item.get("role"),
                             "content": _text_of(item.get("content"), f"{where}.content")})
        elif kind == "function_call":
            call = {"id": item.get("call_id"), "type": "function",
                    "function": {"name": item.get("name"),
                                 "arguments": item.get("arguments", "{}")}}
            last = messages[-1] if messages else None
            if last is not None and last["role"] == "assistant":
                last.setdefault("tool_calls", []).append(call)
            else:
                messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        elif kind == "function_call_output":
            output = item.get("output")
            messages.append({"role": "tool", "tool_call_id": item.get("call_id"),
                             "content": _text_of(output, f"{where}.output")})
        else:
            raise errors.bad_request(f"input item of type {kind!r}: only messages, "
                                     "function_call and function_call_output are served "
                                     "(this server keeps no state)", param=where)
    return messages


def _tools(request: ResponsesRequest) -> list[dict[str, Any]] | None:
    if request.tools is None:
        return None
    tools = []
    for i, tool in enumerate(request.tools):
        if tool.get("type") != "function":
            raise errors.bad_request(f"tool type {tool.get('type')!r}: only 'function' tools "
                                     "are served", param=f"tools[{i}].type")
        tools.append({"type": "function", "function": {
            k: tool[k] for k in ("name", "description", "parameters", "strict") if k in tool}})
    return tools


def _tool_choice(choice: str | dict[str, Any] | None) -> str | dict[str, Any] | None:
    if isinstance(choice, dict):
        if choice.get("type") != "function" or not isinstance(choice.get("name"), str):
            raise errors.bad_request("tool_choice: 'auto', 'none', 'required' or "
                                     "{'type': 'function', 'name': NAME}", param="tool_choice")
        return {"type": "function", "function": {"name": choice["name"]}}
    return choice


def _response_format(text: dict[str, Any] | None) -> dict[str, Any] | None:
    fmt = (text or {}).get("format")
    if not fmt or fmt.get("type") == "text":
        return None
    if fmt.get("type") == "json_schema":
        return {"type": "json_schema", "json_schema": {
            k: fmt[k] for k in ("name", "schema", "strict", "description") if k in fmt}}
    return {"type": fmt.get("type")}


def chat_request(request: ResponsesRequest) -> schemas.ChatCompletionRequest:
    """The chat-completions request that `request` means (module docstring)."""
    if request.previous_response_id:
        raise errors.bad_request("this server keeps no responses: send the whole conversation "
                                 "as input", param="previous_response_id")
    if request.truncation not in (None, "disabled"):
        raise errors.unsupported("truncation", "the input is never truncated; a request over "
                                 "the context is refused")
    if request.reasoning and any(v is not None for v in request.reasoning.values()):
        raise errors.unsupported("reasoning", "the served models have no reasoning settings")
    body = {"model": request.model, "messages": _messages(request), "tools": _tools(request),
            "tool_choice": _tool_choice(request.tool_choice),
            "parallel_tool_calls": request.parallel_tool_calls,
            "max_completion_tokens": request.max_output_tokens,
            "temperature": request.temperature, "top_p": request.top_p,
            "top_logprobs": request.top_logprobs, "logprobs": request.logprobs(),
            "response_format": _response_format(request.text), "user": request.user,
            "trajectory_id": request.trajectory_id, "stream": bool(request.stream)}
    try:
        return schemas.ChatCompletionRequest.model_validate(body)
    except ValidationError as e:
        first = e.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise errors.bad_request(f"the input does not make a conversation: {where}: "
                                 f"{first['msg']}", param="input") from None


class _Ids:
    """The ids of one response and its output items, the same in its stream and its end."""

    def __init__(self) -> None:
        self.response, self.message = new_id("resp"), new_id("msg")
        self.created = int(time.time())
        self.calls: list[str] = []

    def call(self, k: int) -> str:
        while len(self.calls) <= k:
            self.calls.append(new_id("fc"))
        return self.calls[k]


def _output_text(text: str, logprobs: list[dict[str, Any]] | None) -> dict[str, Any]:
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": logprobs or []}


def _message_item(ids: _Ids, text: str, status: str,
                  logprobs: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    content = [_output_text(text, logprobs)] if status == "completed" else []
    return {"type": "message", "id": ids.message, "status": status, "role": "assistant",
            "content": content}


def _call_item(ids: _Ids, k: int, call: dict[str, Any], arguments: str, status: str
               ) -> dict[str, Any]:
    return {"type": "function_call", "id": ids.call(k), "call_id": call["id"],
            "name": call["function"]["name"], "arguments": arguments, "status": status}


def _body(ids: _Ids, request: ResponsesRequest, status: str, output: list[dict[str, Any]],
          outcome: Outcome | None = None, finish_reason: str | None = None) -> dict[str, Any]:
    incomplete = finish_reason == "length"
    body: dict[str, Any] = {
        "id": ids.response, "object": "response", "created_at": ids.created,
        "status": "incomplete" if incomplete else status, "error": None,
        "incomplete_details": {"reason": "max_output_tokens"} if incomplete else None,
        "model": request.model, "instructions": request.instructions, "output": output,
        "tools": request.tools or [], "tool_choice": request.tool_choice or "auto",
        "parallel_tool_calls": request.parallel_tool_calls is not False,
        "temperature": request.temperature, "top_p": request.top_p,
        "max_output_tokens": request.max_output_tokens, "previous_response_id": None,
        "text": request.text or {"format": {"type": "text"}}, "truncation": "disabled",
        "store": False, "metadata": {}, "usage": None,
    }
    if outcome is not None:
        usage = outcome.usage
        body["usage"] = {
            "input_tokens": usage["prompt_tokens"], "output_tokens": usage["completion_tokens"],
            "total_tokens": usage["total_tokens"],
            "input_tokens_details": {"cached_tokens": outcome.extension()["num_reused_tokens"]},
            "output_tokens_details": {"reasoning_tokens": 0}}
        body[EXTENSION] = outcome.extension()
    return body


def _output(service: Service, ids: _Ids, outcome: Outcome, logprobs: bool
            ) -> list[dict[str, Any]]:
    (choice,) = outcome.choices
    message = choice.message or {}
    output = []
    if message.get("content"):
        lp = (token_logprobs(service, choice.result.tokens, choice.result.logprobs)
              if logprobs else None)
        output.append(_message_item(ids, message["content"], "completed", lp))
    for k, call in enumerate(message.get("tool_calls") or []):
        output.append(_call_item(ids, k, call, call["function"]["arguments"], "completed"))
    return output


def response(service: Service, outcome: Outcome, request: ResponsesRequest) -> dict[str, Any]:
    """The Response object of a sampled request."""
    ids = _Ids()
    return _body(ids, request, "completed", _output(service, ids, outcome, request.logprobs()),
                 outcome, outcome.choices[0].finish_reason)


def _event(kind: str, number: int, **fields: Any) -> str:
    data = json.dumps({"type": kind, "sequence_number": number, **fields}, ensure_ascii=False)
    return f"event: {kind}\ndata: {data}\n\n"


class ResponseStream:
    """The typed events of a streamed response (the `respond` stream interface of
    `serving.app`: `opening`, `progress`, `ending`)."""

    def __init__(self, request: ResponsesRequest):
        self.request, self.ids = request, _Ids()
        self.number = 0
        self.message_open = False

    def _next(self, kind: str, **fields: Any) -> str:
        text = _event(kind, self.number, **fields)
        self.number += 1
        return text

    def opening(self, n: int) -> str:
        started = _body(self.ids, self.request, "in_progress", [])
        return (self._next("response.created", response=started)
                + self._next("response.in_progress", response=started))

    def _open_message(self) -> str:
        if self.message_open:
            return ""
        self.message_open = True
        return (self._next("response.output_item.added", output_index=0,
                           item=_message_item(self.ids, "", "in_progress"))
                + self._next("response.content_part.added", item_id=self.ids.message,
                             output_index=0, content_index=0, part=_output_text("", None)))

    def _text_delta(self, service: Service, text: str, tokens: list[int],
                    logprobs: list[float]) -> str:
        lp = (token_logprobs(service, tokens, logprobs) if self.request.logprobs() else [])
        return self._open_message() + self._next(
            "response.output_text.delta", item_id=self.ids.message, output_index=0,
            content_index=0, delta=text, logprobs=lp)

    def progress(self, service: Service, index: int, choice: StreamedChoice) -> str:
        delta = choice.delta()
        return self._text_delta(service, delta, *choice.unreported()) if delta else ""

    def ending(self, service: Service, outcome: Outcome, streamed: Sequence[StreamedChoice]
               ) -> Iterator[str]:
        (choice,), (sent,) = outcome.choices, streamed
        message = choice.message or {}
        text = message.get("content") or ""
        rest = sent.rest(text)
        if rest is None:   # the text sent is no longer the message's beginning
            error = errors.stream_diverged()
            yield self._next("error", code=error.code, message=error.message, param=error.param)
            return
        if rest:
            yield self._text_delta(service, rest, *sent.unreported())
        output = _output(service, self.ids, outcome, self.request.logprobs())
        if self.message_open:
            item = output[0]
            yield self._next("response.output_text.done", item_id=self.ids.message,
                             output_index=0, content_index=0, text=text,
                             logprobs=item["content"][0]["logprobs"])
            yield self._next("response.content_part.done", item_id=self.ids.message,
                             output_index=0, content_index=0, part=item["content"][0])
            yield self._next("response.output_item.done", output_index=0, item=item)
        first = int(self.message_open)
        for k, call in enumerate(message.get("tool_calls") or []):
            index, arguments = first + k, call["function"]["arguments"]
            yield self._next("response.output_item.added", output_index=index,
                             item=_call_item(self.ids, k, call, "", "in_progress"))
            yield self._next("response.function_call_arguments.delta", output_index=index,
                             item_id=self.ids.call(k), delta=arguments)
            yield self._next("response.function_call_arguments.done", output_index=index,
                             item_id=self.ids.call(k), name=call["function"]["name"],
                             arguments=arguments)
            yield self._next("response.output_item.done", output_index=index,
                             item=output[index])
        final = _body(self.ids, self.request, "completed", output, outcome,
                      choice.finish_reason)
        kind = "response.incomplete" if final["status"] == "incomplete" else "response.completed"
        yield self._next(kind, response=final)
