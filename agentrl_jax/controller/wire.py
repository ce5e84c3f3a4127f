"""Wire models of AgentRL's controller and task-worker HTTP protocol.

Both sides import this module: the task workers in `environments/` and the controller. It must
stay free of JAX (importing it is what `environments` may do): pydantic and starlette only.
The status values and the index type are `agentrl_jax.episode`'s, re-exported here because the
wire carries them; code that needs only the status imports `episode`, not this module.

The field names follow AgentRL exactly, including its asymmetries: the worker reports `metric`,
the controller reports `metrics`; the controller's session id travels in a `session_id` header,
the worker's in the JSON body. Messages are OpenAI chat-completions messages and are kept as
plain dicts (validated only for being JSON objects) because the environment, not the wire, owns
their meaning, and dicts are several times cheaper than nested models on the hot path.
"""

from __future__ import annotations

from typing import Any, Literal, NotRequired, TypeVar

from fastapi import HTTPException
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictInt,
    StrictStr,
    TypeAdapter,
    ValidationError,
)
from starlette.requests import Request
from starlette.responses import Response
from typing_extensions import TypedDict  # pydantic needs this one before Python 3.12

from agentrl_jax.episode import SampleIndex, SampleStatus

Message = dict[str, Any]
SESSION_ID_HEADER = "session_id"
ModelT = TypeVar("ModelT", bound=BaseModel)


class _Model(BaseModel):
    # Peers may add fields (AgentRL adds some between versions); ignore them rather than fail.
    model_config = ConfigDict(extra="ignore")


# ----------------------------------------------------------------------------- task worker


class WorkerStartSampleRequest(_Model):
    index: SampleIndex
    session_id: int
    custom_task: dict[str, Any] | None = None


class WorkerEnvOutput(_Model):
    """What a worker answers to start_sample, and (inside `env_out`) to interact."""

    messages: list[Message] = Field(default_factory=list)
    tools: list[dict[str, Any]] | None = None
    status: str = SampleStatus.RUNNING.value
    finish: bool = False
    reward: float = 0.0
    metric: dict[str, Any] = Field(default_factory=dict)


class WorkerInteractRequest(_Model):
    session_id: int
    messages: list[Message]


class WorkerInteractResponse(_Model):
    session_id: int
    env_out: WorkerEnvOutput


class WorkerSessionRequest(_Model):
    """Body of the worker's cancel, cancel_with_notice and sample_status."""

    session_id: int


class WorkerStatus(_Model):
    concurrency: int
    current: int


# ----------------------------------------------------------------------------- controller


class StartSampleRequest(_Model):
    name: str
    index: StrictInt | StrictStr   # `true` is not index 1
    custom_task: dict[str, Any] | None = None


class StartSampleResponse(_Model):
    """AgentRL returns `{messages, tools}`; the rest says whether the episode already ended."""

    messages: list[Message] = Field(default_factory=list)
    tools: list[dict[str, Any]] | None = None
    finish: bool = False
    status: str = SampleStatus.RUNNING.value
    reward: float = 0.0
    metrics: dict[str, Any] = Field(default_factory=dict)


class InteractRequest(_Model):
    messages: list[Message]


class _FunctionCall(TypedDict):
    name: str
    arguments: str


class _ToolCall(TypedDict):
    __pydantic_config__ = ConfigDict(extra="allow")  # type: ignore[misc]
    id: str
    type: Literal["function"]
    function: _FunctionCall


class _AssistantMessage(TypedDict):
    """What AgentRL's worker accepts from the agent (`ChatCompletionAssistantMessageParam`)."""

    __pydantic_config__ = ConfigDict(extra="allow")  # type: ignore[misc]
    role: Literal["assistant"]
    content: NotRequired[str | list[dict[str, Any]] | None]
    tool_calls: NotRequired[list[_ToolCall] | None]


_AGENT_MESSAGES = TypeAdapter(list[_AssistantMessage])


def agent_message_errors(messages: list[Message]) -> list[dict[str, Any]]:
    """Why `messages` cannot be an agent's turn (FastAPI's 422 `detail` shape); [] when it can.

    A turn is one or more assistant messages. AgentRL's worker answers anything else with a
    500 (and closes the connection), so the controller refuses it first, as a 422 the session
    survives.
    """
    if not messages:
        return [{"type": "too_short", "loc": ["body", "messages"],
                 "msg": "an agent turn has at least one message"}]
    try:
        _AGENT_MESSAGES.validate_python(messages)
    except ValidationError as error:
        return [{**e, "loc": ["body", "messages", *e["loc"][1:]]} for e in _errors(error)]
    return []


class InteractResponse(_Model):
    finish: bool
    reward: float = 0.0
    status: str = SampleStatus.RUNNING.value
    messages: list[Message] = Field(default_factory=list)
    metrics: dict[str, Any] = Field(default_factory=dict)


class HeartbeatRequest(_Model):
    """A worker's registration, repeated every few seconds.

    `worker_id` and `current` are ours: AgentRL's worker sends neither, so both are optional.
    `worker_id` changes when a worker process restarts, which lets the controller end the
    sessions of the previous incarnation at once instead of at the next reconciliation.
    """

    name: str = Field(min_length=1)
    address: str = Field(min_length=1)
    concurrency: int = Field(ge=0)
    indices: list[SampleIndex]
    worker_id: str | None = None
    current: int | None = None


class MarkStaleRequest(_Model):
    name: str
    worker_id: str
    stale: bool = True


class CancelNotice(_Model):
    session_id: int


# ----------------------------------------------------------------------------- HTTP helpers
# Hot endpoints parse and serialise with pydantic's Rust core directly: FastAPI's generic body
# handling and `jsonable_encoder` cost more than the rest of a proxied interact together.


def parse_model(body: bytes, model: type[ModelT]) -> ModelT:
    """`body` as `model`; a malformed or mistyped body is an HTTP 422, never a 500."""
    try:
        return model.model_validate_json(body or b"null")
    except ValidationError as error:
        raise HTTPException(422, _errors(error)) from None


def _errors(error: ValidationError) -> list[dict[str, Any]]:
    """pydantic's errors as JSON-able dicts, located in the body as FastAPI's 422 `detail`."""
    return [{"type": e["type"], "loc": ["body", *e["loc"]], "msg": e["msg"]}
            for e in error.errors(include_url=False, include_context=False,
                                  include_input=False)]


async def read_model(request: Request, model: type[ModelT]) -> ModelT:
    return parse_model(await request.body(), model)


def json_response(model: BaseModel, status_code: int = 200,
                  headers: dict[str, str] | None = None) -> Response:
    return Response(model.model_dump_json(), status_code, headers,
                    media_type="application/json")


def session_id_header(request: Request) -> int:
    """The `session_id` header as an int; missing or malformed is a 400."""
    raw = request.headers.get(SESSION_ID_HEADER)
    try:
        return int(raw)   # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise HTTPException(400, f"header {SESSION_ID_HEADER} must be an integer") from None
