"""What the server does for a request, apart from HTTP: validate it, render the prompt, sample
`n` choices with the engine, and turn the sampled tokens into OpenAI choices.

Prompts are rendered by `chat.conversation.Conversation` (the agent loop's renderer), and a
request with a trajectory id goes through `serving.trajectories` so that its stream holds
exactly the sampled tokens. Assistant text is decoded from the sampled ids; tool calls are read
by the policy's parser (`chat.tool_parsers`), so a call the parser cannot read stays text, as
in training. The tokens, log-probabilities and weight versions of every choice travel with the
response (`Outcome.extension`, the `agentrl` field).
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import json
import re
import uuid
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from agentrl_jax.chat.conversation import Message, TemplateNotPrefixStableError
from agentrl_jax.chat.tool_parsers import ParsedTurn, get_parser, partial_marker, settled_content
from agentrl_jax.rollout.agent_loop import Generator
from agentrl_jax.rollout.cross_policy import TRAINED_POLICY
from agentrl_jax.sampling.constraint import ConstraintError, GrammarCompiler, TokenConstraint
from agentrl_jax.sampling.engine import TokenCallback
from agentrl_jax.sampling.types import (
    GenerateRequest,
    GenerationResult,
    SamplingParams,
    TokenEvent,
)
from agentrl_jax.serving import errors, grammars, schemas
from agentrl_jax.serving.trajectories import Trajectory, TrajectoryBusyError, TrajectoryStore

# Function names both parsers read back (glm4 writes the name bare on its own line).
TOOL_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.\-]{0,63}")


class Engine(Generator, Protocol):
    """What the server needs of a sampler (`sampling.AsyncSamplingEngine` is one): the agent
    loop's `Generator`, whose `generate` also reports a turn's tokens as they are sampled (on
    the caller's event loop, all before it returns: streaming), and the weight version of each
    policy it serves."""

    async def generate(self, request: GenerateRequest, on_tokens: TokenCallback | None = None
                       ) -> GenerationResult: ...

    async def policies(self) -> dict[str, int]: ...


# Called with (choice index, the choice's new tokens) as `Service.run` samples them.
ChoiceTokens = Callable[[int, TokenEvent], None]


@dataclasses.dataclass(frozen=True)
class ServerConfig:
    """Settings of one server.

    Attributes:
      models: served model name -> engine policy (`SamplingEngine`'s pool) it samples from.
      max_context: the engine's context limit (prompt + completion), in tokens.
      default_max_tokens: completion budget when a request names none (capped by the context).
      max_n: most choices per request.
      max_concurrent: requests generating at once; more are refused with 429.
      max_body_bytes: larger request bodies are refused with 413.
      api_key: required as `Authorization: Bearer KEY` when set (401 otherwise).
      max_trajectories: open trajectories kept; the least recently used is dropped beyond.
    """

    models: dict[str, str]
    max_context: int
    default_max_tokens: int = 512
    max_n: int = 8
    max_concurrent: int = 64
    max_body_bytes: int = 4 << 20
    api_key: str | None = None
    max_trajectories: int = 1024


@dataclasses.dataclass
class Choice:
    result: GenerationResult
    text: str  # the text returned (decoded, stop string cut)
    message: Message | None = None  # chat: the assistant message returned
    finish_reason: str = "stop"


@dataclasses.dataclass
class Outcome:
    """The sampled choices of one request, with what the response reports about them."""

    prompt: list[int]
    choices: list[Choice]
    trajectory: Trajectory | None = None

    @property
    def usage(self) -> dict[str, int]:
        completion = sum(len(c.result.tokens) for c in self.choices)
        return {"prompt_tokens": len(self.prompt), "completion_tokens": completion,
                "total_tokens": len(self.prompt) + completion}

    def extension(self) -> dict[str, Any]:
        """The `agentrl` field: the exact token stream of the request and of each choice."""
        traj = self.trajectory
        return {
            "trajectory_id": traj.id if traj else None,
            "segment": len(traj.segments) - 1 if traj else None,
            "prompt_token_ids": list(self.prompt),
            "num_reused_tokens": max((c.result.num_reused_tokens for c in self.choices),
                                     default=0),
            "choices": [{"index": i, "completion_token_ids": list(c.result.tokens),
                         "logprobs": list(c.result.logprobs),
                         "weight_versions": list(c.result.versions),
                         "policy": c.result.policy,
                         "engine_finish_reason": str(c.result.finish_reason)}
                        for i, c in enumerate(self.choices)],
        }


@dataclasses.dataclass
class Prepared:
    """A checked request, ready to sample."""

    prompt: list[int]
    params: list[SamplingParams]
    policy: str
    trajectory: Trajectory | None = None
    session_id: str | None = None
    evicted: list[str] = dataclasses.field(default_factory=list)  # sessions to end first
    parse: bool = False  # read tool calls out of the text
    chat: bool = True
    constraints: list[TokenConstraint] | None = None  # one grammar per choice, or None


class Service:
    """Requests to engine calls and back."""

    def __init__(self, engine: Engine, tokenizer: Any, parser: str,
                 end_of_turn_ids: Sequence[int], config: ServerConfig):
        self.engine, self.tokenizer, self.config = engine, tokenizer, config
        self.parser_name = parser
        self.parser = get_parser(parser)
        self.end_of_turn_ids = tuple(int(i) for i in end_of_turn_ids)
        # Policy ids as the pipeline's mix numbers them: the trained policy first.
        policies = sorted(dict.fromkeys(config.models.values()),
                          key=lambda p: p != TRAINED_POLICY)
        self.trajectories = TrajectoryStore(
            tokenizer, parser, self.end_of_turn_ids,
            {p: i for i, p in enumerate(policies)}, config.max_trajectories)
        self._grammar_compiler: GrammarCompiler | None = None

    def grammar_compiler(self) -> GrammarCompiler:
        """Grammars over the policy's tokenizer, built on the first call (~1 s for a 49k-token
        vocabulary): the first constrained request, or a warm-up."""
        if self._grammar_compiler is None:
            self._grammar_compiler = GrammarCompiler(self.tokenizer, self.end_of_turn_ids)
        return self._grammar_compiler

    def _constraints(self, request: schemas.ChatCompletionRequest, trajectory_id: str | None
                     ) -> list[TokenConstraint] | None:
        """A grammar per choice for what the request constrains (`serving.grammars`), or None.

        400 for a grammar that does not compile (a JSON schema llguidance cannot serve), and
        for a constrained turn of a trajectory: the trainer scores tokens under the
        unconstrained policy, so it would train on wrong importance ratios.
        """
        # The tools as sent (`_tools` has checked them), `strict` included.
        functions = [{"type": "function", "function": t.function.model_dump(exclude_none=True)}
                     for t in request.tools or ()]
        grammar = grammars.request_grammar(
            self.parser_name, functions, request.tool_choice, request.parallel_tool_calls,
            request.response_format, lambda text: self.grammar_compiler().literal(text))
        if grammar is None:
            return None
        if trajectory_id is not None:
            raise errors.bad_request(
                "a trajectory's turns are trained, and the trainer scores tokens under the "
                "unconstrained policy: constrained turns (strict tools, a required or named "
                "tool_choice, parallel_tool_calls false, a JSON response_format) are not "
                "recorded in trajectories", param="trajectory_id", code="constrained_trajectory")
        try:
            return [self.grammar_compiler().lark(grammar) for _ in range(request.n)]
        except ConstraintError as e:
            raise errors.bad_request(f"the requested format cannot be served: {e}",
                                     param="response_format" if request.response_format
                                     else "tools", code="invalid_schema") from e

    # ---- checks ----------------------------------------------------------------------------

    def policy_for(self, model: str) -> str:
        if model not in self.config.models:
            raise errors.model_not_found(model, list(self.config.models))
        return self.config.models[model]

    def _check_common(self, request: schemas._Sampling) -> None:
        for param, why in schemas.refused_parameters(request):
            raise errors.unsupported(param, why)
        if request.n > self.config.max_n:
            raise errors.bad_request(f"n={request.n} is more than this server's {self.config.max_n}"
                                     " choices per request", param="n")
        stops = request.stop_strings()
        if len(stops) > schemas.MAX_STOP_STRINGS or any(not s for s in stops):
            raise errors.bad_request(f"stop takes at most {schemas.MAX_STOP_STRINGS} non-empty "
                                     "strings", param="stop")

    def _params(self, request: schemas._Sampling, prompt_len: int, choice: int) -> SamplingParams:
        limit, asked = self.config.max_context, request.max_new_tokens()
        if prompt_len >= limit or (asked is not None and prompt_len + asked > limit):
            raise errors.context_length_exceeded(limit, prompt_len, asked)
        max_new = asked if asked is not None else min(self.config.default_max_tokens,
                                                      limit - prompt_len)
        seed = None if request.seed is None else (request.seed + choice) % 2**31
        return SamplingParams(
            temperature=1.0 if request.temperature is None else request.temperature,
            top_p=1.0 if request.top_p is None else request.top_p, max_new_tokens=max_new,
            stop_token_ids=self.end_of_turn_ids, stop_strings=request.stop_strings(), seed=seed)

    # ---- generation ------------------------------------------------------------------------

    def _all_params(self, request: schemas._Sampling, prompt: list[int]) -> list[SamplingParams]:
        return [self._params(request, len(prompt), i) for i in range(request.n)]

    async def run(self, prepared: Prepared, on_tokens: ChoiceTokens | None = None) -> Outcome:
        """Samples a prepared request's choices (the first shares the trajectory's KV session)
        and records the trajectory's turn; `on_tokens(i, event)` is told choice i's tokens as
        the engine samples them, all before `run` returns (a stream sends them)."""
        try:
            for old in prepared.evicted:
                await self.engine.end_session(old)
            try:
                async with asyncio.TaskGroup() as group:
                    tasks = [group.create_task(self._generate(GenerateRequest(
                        prepared.prompt, p, prepared.policy,
                        prepared.session_id if i == 0 else None,
                        prepared.constraints[i] if prepared.constraints else None),
                        None if on_tokens is None else functools.partial(on_tokens, i)))
                        for i, p in enumerate(prepared.params)]
            except BaseExceptionGroup as failed:
                raise errors.engine_error(failed.exceptions[0]) from failed.exceptions[0]
        except BaseException:
            self.release(prepared)
            raise
        results = [t.result() for t in tasks]
        if prepared.chat:
            choices = [self._chat_choice(r, prepared.parse) for r in results]
        else:
            choices = [Choice(r, self._text(r), None,
                              "length" if r.finish_reason == "length" else "stop")
                       for r in results]
        if prepared.trajectory is not None:
            first = choices[0]
            self.trajectories.end_turn(prepared.trajectory, tokens=first.result.tokens,
                                       logprobs=first.result.logprobs,
                                       versions=first.result.versions, policy=prepared.policy,
                                       returned=first.message)
        return Outcome(prepared.prompt, choices, prepared.trajectory)

    async def _generate(self, request: GenerateRequest, on_tokens: TokenCallback | None
                        ) -> GenerationResult:
        # Without a stream, the agent loop's plain `Generator.generate(request)` is called.
        if on_tokens is None:
            return await self.engine.generate(request)
        return await self.engine.generate(request, on_tokens)

    def release(self, prepared: Prepared) -> None:
        """Frees the trajectory of a prepared request that will not be (or was not) sampled."""
        if prepared.trajectory is not None and prepared.trajectory.busy:
            self.trajectories.end_turn(prepared.trajectory)

    def _decoded(self, tokens: Sequence[int]) -> str:
        """Sampled tokens' text, without the end-of-turn token that ends a turn."""
        if tokens and tokens[-1] in self.end_of_turn_ids:
            tokens = tokens[:-1]
        return self.tokenizer.decode(list(tokens), skip_special_tokens=False)

    def _text(self, result: GenerationResult) -> str:
        text = self._decoded(result.tokens)
        if result.stop_string is not None:  # OpenAI returns the text before the stop string
            text = text[: text.find(result.stop_string)] if result.stop_string in text else text
        return text

    def settled_text(self, tokens: Sequence[int], params: SamplingParams, parse: bool) -> str:
        """What a stream may send of a choice whose first `tokens` are sampled: a beginning of
        the text it will return (chat: of its message content) that no later token changes.

        Held back are a character still split over tokens (U+FFFD), the text from a stop
        string on and an end that may begin one (the returned text ends before the stop), and,
        when tool calls are parsed, whatever the parser may still read as a call or strip
        (`tool_parsers.settled_content`). Assumes, as byte-level BPE decoding gives, that the
        text of a token prefix begins the text of the whole; where it does not, the stream
        notices at the end (`responses.StreamedChoice.rest`).
        """
        text = self._decoded(tokens).rstrip("\ufffd")
        for stop in params.stop_strings:
            at = text.find(stop)
            text = text[:at] if at != -1 else text[: len(text) - partial_marker(text, stop)]
        return settled_content(self.parser, text) if parse else text

    def token_texts(self, tokens: Sequence[int]) -> list[str]:
        """Each token's own text (a byte-level token that splits a character decodes to U+FFFD)."""
        return [self.tokenizer.decode([t], skip_special_tokens=False) for t in tokens]

    def prepare_chat(self, request: schemas.ChatCompletionRequest,
                     trajectory_id: str | None) -> Prepared:
        """Checks and renders a chat request (every 4xx is raised here, before any response
        is started); with a trajectory, its turn is begun (`run` or `release` ends it)."""
        self._check_common(request)
        policy = self.policy_for(request.model)
        tools = self._tools(request)
        parse = tools is not None and request.tool_choice != "none"
        messages = [_message(m, i) for i, m in enumerate(request.messages)]
        if trajectory_id is not None and request.n != 1:
            raise errors.bad_request("a trajectory is one token stream: n must be 1", param="n")
        constraints = self._constraints(request, trajectory_id)
        if trajectory_id is None:
            try:
                prompt = self.trajectories.new_conversation(messages, tools).prompt_tokens()
            except (TemplateNotPrefixStableError, ValueError, TypeError) as e:
                raise errors.bad_request(f"the messages cannot be rendered: {e}",
                                         param="messages") from e
            return Prepared(prompt, self._all_params(request, prompt), policy, parse=parse,
                            constraints=constraints)
        try:
            trajectory, evicted = self.trajectories.begin_turn(trajectory_id, messages, tools)
        except TrajectoryBusyError as e:
            raise errors.APIError(409, str(e), type=errors.CONFLICT, code="trajectory_busy") from e
        except (TemplateNotPrefixStableError, ValueError, TypeError) as e:
            raise errors.bad_request(f"the messages cannot be rendered: {e}",
                                     param="messages") from e
        segment = trajectory.current
        prepared = Prepared(segment.conversation.prompt_tokens(), [], policy, trajectory,
                            segment.session_id, evicted, parse=parse)
        try:
            prepared.params = self._all_params(request, prepared.prompt)
        except BaseException:
            self.release(prepared)
            raise
        return prepared

    def _chat_choice(self, result: GenerationResult, parse: bool) -> Choice:
        text = self._text(result)
        finish = "length" if result.finish_reason == "length" else "stop"
        message: Message = {"role": "assistant", "content": text}
        parsed = self.parser.parse(text) if parse else None
        if isinstance(parsed, ParsedTurn) and parsed.tool_calls:
            calls = [{**call, "id": f"call_{uuid.uuid4().hex[:24]}"} for call in parsed.tool_calls]
            message = {"role": "assistant", "content": parsed.content or None,
                       "tool_calls": calls}
            finish = "tool_calls"
        return Choice(result, text, message, finish)

    def prepare_completion(self, request: schemas.CompletionRequest) -> Prepared:
        self._check_common(request)
        policy = self.policy_for(request.model)
        prompt = self._completion_prompt(request.prompt)
        return Prepared(prompt, self._all_params(request, prompt), policy, chat=False)

    def _completion_prompt(self, prompt: str | list[str] | list[int]) -> list[int]:
        if isinstance(prompt, list) and prompt and all(isinstance(p, int) for p in prompt):
            vocab = len(self.tokenizer)
            if any(not 0 <= int(p) < vocab for p in prompt):
                raise errors.bad_request(f"token ids must be in [0, {vocab})", param="prompt")
            return [int(p) for p in prompt]
        if isinstance(prompt, list):
            if len(prompt) != 1:
                raise errors.unsupported("prompt", "one prompt per request (a string or a list "
                                         "of token ids); send a batch as separate requests")
            prompt = str(prompt[0])
        ids = list(self.tokenizer.encode(prompt, add_special_tokens=False))
        if not ids:
            raise errors.bad_request("the prompt is empty", param="prompt")
        return ids

    def _tools(self, request: schemas.ChatCompletionRequest) -> list[dict[str, Any]] | None:
        """The request's tools as the templates take them; 400 for those the parser cannot
        serve and for a tool_choice that names no tool."""
        choice = request.tool_choice
        grammars.chosen_function(choice)   # 400 for a malformed choice
        if not request.tools:
            if choice not in (None, "none", "auto"):
                raise errors.bad_request("tool_choice needs tools", param="tool_choice")
            return None
        seen: set[str] = set()
        out = []
        for i, tool in enumerate(request.tools):
            fn, where = tool.function, f"tools[{i}]"
            if tool.type != "function":
                raise errors.bad_request(f"tool type {tool.type!r}: only 'function' tools are "
                                         "served", param=f"{where}.type",
                                         code="invalid_tool_schema")
            if not TOOL_NAME.fullmatch(fn.name) or fn.name in seen:
                raise errors.bad_request(
                    f"tool name {fn.name!r} cannot be served: names must be unique and match "
                    f"{TOOL_NAME.pattern} for the {self.parser_name} parser to read calls back",
                    param=f"{where}.function.name", code="invalid_tool_schema")
            if fn.parameters is not None and fn.parameters.get("type", "object") != "object":
                raise errors.bad_request("tool parameters must be a JSON schema of type "
                                         "'object'", param=f"{where}.function.parameters",
                                         code="invalid_tool_schema")
            seen.add(fn.name)
            # `strict` instructs the sampler (`_constraints`), not the model: the prompt is the
            # same with it or without.
            out.append({"type": "function",
                        "function": fn.model_dump(exclude_none=True, exclude={"strict"})})
        return out


def _message(message: schemas.ChatMessage, index: int) -> Message:
    """An OpenAI message as the templates take it: text content, arguments as JSON text."""
    content = message.content
    if isinstance(content, list):
        if any(part.type != "text" or part.text is None for part in content):
            raise errors.unsupported(f"messages[{index}].content",
                                     "only text content parts are served")
        content = "".join(part.text or "" for part in content)
    out: Message = {"role": "system" if message.role == "developer" else message.role,
                    "content": content}
    if message.tool_calls:
        out["tool_calls"] = [
            {"id": call.id, "type": "function", "function": {
                "name": call.function.name,
                "arguments": call.function.arguments if isinstance(call.function.arguments, str)
                else json.dumps(call.function.arguments, ensure_ascii=False)}}
            for call in message.tool_calls]
    for key in ("name", "tool_call_id"):
        if getattr(message, key) is not None:
            out[key] = getattr(message, key)
    return out
