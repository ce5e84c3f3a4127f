"""The request bodies the server reads: OpenAI's chat-completions, completions and Responses
requests, and the reward that ends a trajectory.

Only types and fixed ranges are checked here (pydantic answers a wrong one with a 400 naming the
field); limits of the server (its `n`, its context) are checked where the server knows them
(`serving.service`). Parameters OpenAI defines that the sampler cannot honour are declared, so
that a non-default value is refused with a clear 400 (`refused_parameters`) instead of being
silently dropped; fields OpenAI does not define are ignored, as agent frameworks add their own.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from agentrl_jax.episode import SampleStatus

MAX_STOP_STRINGS = 4  # OpenAI's limit on `stop`
LOGPROBS_INCLUDE = "message.output_text.logprobs"  # Responses: `include` asking for them


class _Body(BaseModel):
    model_config = ConfigDict(extra="ignore")


class ContentPart(BaseModel):
    model_config = ConfigDict(extra="allow")
    type: str
    text: str | None = None


class FunctionCall(_Body):
    name: str
    arguments: str | dict[str, Any] = "{}"


class ToolCall(_Body):
    id: str | None = None
    type: Literal["function"] = "function"
    function: FunctionCall


class ChatMessage(_Body):
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[ContentPart] | None = None
    name: str | None = None
    tool_calls: list[ToolCall] | None = None
    tool_call_id: str | None = None


class FunctionDefinition(_Body):
    name: str
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None


class Tool(_Body):
    type: str = "function"
    function: FunctionDefinition


class _Sampling(_Body):
    """What both completion routes share."""

    model: str
    n: int = Field(1, ge=1)
    temperature: float | None = Field(None, ge=0.0, le=2.0)
    top_p: float | None = Field(None, gt=0.0, le=1.0)
    max_tokens: int | None = Field(None, ge=1)
    stop: str | list[str] | None = None
    seed: int | None = None
    stream: bool | None = False
    stream_options: dict[str, Any] | None = None
    user: str | None = None
    # Refused when set to anything but their default (see `refused_parameters`).
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    logit_bias: dict[str, float] | None = None
    best_of: int | None = None

    def stop_strings(self) -> tuple[str, ...]:
        stop = [self.stop] if isinstance(self.stop, str) else list(self.stop or [])
        return tuple(stop)

    def include_usage(self) -> bool:
        return bool((self.stream_options or {}).get("include_usage"))

    def max_new_tokens(self) -> int | None:
        return self.max_tokens


class ChatCompletionRequest(_Sampling):
    messages: list[ChatMessage] = Field(min_length=1)
    tools: list[Tool] | None = None
    tool_choice: str | dict[str, Any] | None = None
    parallel_tool_calls: bool | None = None
    logprobs: bool | None = False
    top_logprobs: int | None = Field(None, ge=0, le=20)
    max_completion_tokens: int | None = Field(None, ge=1)
    response_format: dict[str, Any] | None = None
    trajectory_id: str | None = Field(None, min_length=1, max_length=200)

    def max_new_tokens(self) -> int | None:
        return self.max_completion_tokens or self.max_tokens


class CompletionRequest(_Sampling):
    prompt: str | list[str] | list[int]
    logprobs: int | None = Field(None, ge=0, le=5)
    echo: bool | None = False
    suffix: str | None = None


class ResponsesRequest(_Body):
    """A Responses API request (`serving.responses_api` serves it as the chat request it
    means); the fields the server reads."""

    model: str
    input: str | list[dict[str, Any]]
    instructions: str | None = None
    tools: list[dict[str, Any]] | None = None
    tool_choice: str | dict[str, Any] | None = None
    parallel_tool_calls: bool | None = None
    max_output_tokens: int | None = Field(None, ge=1)
    temperature: float | None = Field(None, ge=0.0, le=2.0)
    top_p: float | None = Field(None, gt=0.0, le=1.0)
    top_logprobs: int | None = Field(None, ge=0, le=20)
    stream: bool | None = False
    text: dict[str, Any] | None = None
    include: list[str] | None = None
    user: str | None = None
    # Refused when set (`responses_api.chat_request`).
    previous_response_id: str | None = None
    truncation: str | None = None
    reasoning: dict[str, Any] | None = None
    trajectory_id: str | None = Field(None, min_length=1, max_length=200)

    def logprobs(self) -> bool:
        return LOGPROBS_INCLUDE in (self.include or [])


class RewardRequest(_Body):
    """Ends a trajectory: its reward and how it ended, and where the pipeline files it."""

    reward: float
    status: SampleStatus = SampleStatus.COMPLETED
    task: str = "openai"
    group_id: int = 0
    member: int = 0
    # The members its group has (`serving.groups`); unset, the collector's default.
    group_size: int | None = Field(default=None, ge=1)
    metrics: dict[str, Any] = Field(default_factory=dict)


def refused_parameters(request: _Sampling) -> list[tuple[str, str]]:
    """(parameter, why) for each parameter `request` sets that the server cannot honour."""
    refused = []
    if request.presence_penalty or request.frequency_penalty:
        which = "presence_penalty" if request.presence_penalty else "frequency_penalty"
        refused.append((which, "the sampler applies no repetition penalties"))
    if request.logit_bias:
        refused.append(("logit_bias", "the sampler applies no logit bias"))
    if request.best_of not in (None, 1):
        refused.append(("best_of", "use n; choices are not ranked"))
    if isinstance(request, ChatCompletionRequest):
        if request.top_logprobs:
            refused.append(("top_logprobs", "the engine returns the log-probability of the "
                            "sampled token only, not the most likely alternatives"))
    if isinstance(request, CompletionRequest):
        if request.logprobs:
            refused.append(("logprobs", "only logprobs=0 (the sampled tokens' log-"
                            "probabilities) is served; the engine gives no alternatives"))
        if request.echo:
            refused.append(("echo", "the prompt is not scored"))
        if request.suffix:
            refused.append(("suffix", "no insertion mode"))
    return refused
