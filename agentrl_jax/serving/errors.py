"""Errors as the OpenAI API shapes them: `{"error": {"message", "type", "param", "code"}}`.

Every refusal of the server is an `APIError` raised where the problem is found and turned into
that body, with its HTTP status, by the handlers `install_handlers` registers; FastAPI's own
failures (unparseable JSON, a field of the wrong type, an unknown route) get the same shape, so
an OpenAI client raises its usual typed exception (`openai.BadRequestError`, ...) for each.
Nothing a request does reaches the engine loop as an exception: the engine fails bad requests
one by one (`SamplingEngine.step`), and what it raises back is mapped here too.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

# The `type` values of OpenAI's error bodies.
INVALID_REQUEST = "invalid_request_error"
AUTHENTICATION = "authentication_error"
NOT_FOUND = "not_found_error"
RATE_LIMIT = "rate_limit_error"
CONFLICT = "conflict_error"
SERVER = "server_error"
UNAVAILABLE = "service_unavailable_error"


class APIError(Exception):
    """A refusal with its HTTP status and OpenAI error fields."""

    def __init__(self, status: int, message: str, *, type: str = INVALID_REQUEST,
                 param: str | None = None, code: str | None = None):
        super().__init__(message)
        self.status, self.message, self.type, self.param, self.code = (
            status, message, type, param, code)

    def body(self) -> dict[str, Any]:
        return error_body(self.message, self.type, self.param, self.code)

    def response(self) -> JSONResponse:
        return JSONResponse(self.body(), status_code=self.status)


def error_body(message: str, type: str, param: str | None = None,
               code: str | None = None) -> dict[str, Any]:
    return {"error": {"message": message, "type": type, "param": param, "code": code}}


def bad_request(message: str, param: str | None = None, code: str | None = None) -> APIError:
    return APIError(400, message, param=param, code=code)


def unsupported(param: str, why: str) -> APIError:
    """A parameter the server refuses rather than silently ignores."""
    return APIError(400, f"'{param}' is not supported by this server: {why}", param=param,
                    code="unsupported_parameter")


def model_not_found(model: str, served: list[str]) -> APIError:
    return APIError(404, f"The model '{model}' does not exist; this server serves "
                    f"{', '.join(served)}", type=NOT_FOUND, param="model",
                    code="model_not_found")


def context_length_exceeded(limit: int, prompt: int, completion: int | None) -> APIError:
    asked = prompt if completion is None else prompt + completion
    detail = f"{prompt} in the messages" + (
        "" if completion is None else f", {completion} in the completion")
    return APIError(400, f"This model's maximum context length is {limit} tokens. However, "
                    f"you requested {asked} tokens ({detail}). Please reduce the length of "
                    "the messages or completion.", param="messages",
                    code="context_length_exceeded")


def engine_error(error: BaseException) -> APIError:
    """What the engine raised for one request, as the client's error.

    `SamplingEngine.submit` raises ValueError only for a request it cannot serve (stop strings
    without a decoder, too many stop ids, an empty or over-long prompt), and admission raises
    MemoryError for one larger than the whole KV pool: the client's problem, 400. Anything else
    is ours, 500, with the message (the engine loop itself goes on).
    """
    if isinstance(error, MemoryError):
        return APIError(400, f"the request does not fit the server's KV cache: {error}",
                        param="max_tokens", code="context_length_exceeded")
    if isinstance(error, ValueError):
        return bad_request(str(error))
    return APIError(500, f"generation failed: {error!r}", type=SERVER)


def stream_diverged() -> APIError:
    """A streamed completion whose text no longer begins with what was already sent (a weight
    update restarted its turn: `responses.StreamedChoice.rest`); sent as the stream's error."""
    return APIError(500, "the completion changed after part of it was streamed (its turn was "
                    "restarted on new weights); retry the request", type=SERVER,
                    code="stream_diverged")


_VALIDATION_TYPES = {"json_invalid": "We could not parse the JSON body of your request."}


def _validation_error(exc: RequestValidationError) -> APIError:
    errors = exc.errors()
    first = errors[0] if errors else {}
    if first.get("type") in _VALIDATION_TYPES:
        return bad_request(_VALIDATION_TYPES[first["type"]] + f" ({first.get('msg', '')})",
                           code="invalid_json")
    loc = [str(part) for part in first.get("loc", ()) if part != "body"]
    param = ".".join(loc) or None
    return bad_request(f"Invalid request: {first.get('msg', 'malformed body')}"
                       + (f" (at '{param}')" if param else ""), param=param)


def install_handlers(app: FastAPI) -> None:
    """Every error of `app` answered in OpenAI's shape."""

    async def on_api_error(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, APIError)
        return exc.response()

    async def on_validation(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, RequestValidationError)
        return _validation_error(exc).response()

    async def on_http(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, StarletteHTTPException)
        kind = NOT_FOUND if exc.status_code == 404 else INVALID_REQUEST
        return APIError(exc.status_code, str(exc.detail), type=kind).response()

    app.add_exception_handler(APIError, on_api_error)
    app.add_exception_handler(RequestValidationError, on_validation)
    app.add_exception_handler(StarletteHTTPException, on_http)
