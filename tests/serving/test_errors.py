"""Refusals in OpenAI's error shape, with the status the `openai` client maps to its exception,
and the guards: API key, body size, concurrency."""

import concurrent.futures

import httpx
import openai
import pytest

from launch.demo import WEATHER_TOOL
from tests.serving.conftest import wait_until

ASK = [{"role": "user", "content": "What is the weather in Paris?"}]


def _refused(call, exception=openai.BadRequestError):
    with pytest.raises(exception) as error:
        call()
    body = error.value.body
    assert set(body) == {"message", "type", "param", "code"}, body
    return body


def test_unknown_model_is_404(client):
    body = _refused(lambda: client.chat.completions.create(model="gpt-9", messages=ASK),
                    openai.NotFoundError)
    assert (body["code"], body["param"]) == ("model_not_found", "model")
    assert "tiny-agent" in body["message"]


def test_over_long_context_is_400(client):
    long = [{"role": "user", "content": "Hello there " * 400}]
    body = _refused(lambda: client.chat.completions.create(model="tiny-text", messages=long))
    assert body["code"] == "context_length_exceeded"
    # A prompt that fits, with more completion than the context has room for.
    body = _refused(lambda: client.chat.completions.create(model="tiny-text", messages=ASK,
                                                           max_tokens=500))
    assert body["code"] == "context_length_exceeded" and "512" in body["message"]


@pytest.mark.parametrize("params, param", [
    ({"n": 0}, "n"), ({"n": 9}, "n"), ({"max_tokens": 0}, "max_tokens"),
    ({"temperature": 2.5}, "temperature"), ({"top_p": 0}, "top_p"),
    ({"top_logprobs": 2, "logprobs": True}, "top_logprobs"),
    ({"presence_penalty": 0.5}, "presence_penalty"), ({"stop": ["a"] * 5}, "stop"),
    ({"tool_choice": {"type": "function", "function": {"name": "nope"}}, "tools": [WEATHER_TOOL]},
     "tool_choice"),
    ({"tool_choice": "required"}, "tool_choice"),
    ({"response_format": {"type": "yaml"}}, "response_format"),
])
def test_out_of_range_or_unsupported_parameters_are_400(client, params, param):
    body = _refused(lambda: client.chat.completions.create(model="tiny-text", messages=ASK,
                                                           **params))
    assert body["param"] == param and body["type"] == "invalid_request_error"


@pytest.mark.parametrize("tool, param", [
    ({"type": "function", "function": {"name": "get weather!", "parameters": {}}},
     "tools[0].function.name"),
    ({"type": "code_interpreter", "function": {"name": "x"}}, "tools[0].type"),
    ({"type": "function", "function": {"name": "f", "parameters": {"type": "array"}}},
     "tools[0].function.parameters"),
])
def test_tool_schemas_the_parser_cannot_serve_are_400(client, tool, param):
    body = _refused(lambda: client.chat.completions.create(model="tiny-agent", messages=ASK,
                                                           tools=[tool]))
    assert (body["code"], body["param"]) == ("invalid_tool_schema", param)


def test_bad_json_and_wrong_types_are_400(server):
    with httpx.Client(base_url=server.url) as http:
        bad = http.post("/v1/chat/completions", content=b'{"model": "tiny-text", "mess',
                        headers={"content-type": "application/json"})
        assert bad.status_code == 400
        assert bad.json()["error"]["code"] == "invalid_json"
        wrong = http.post("/v1/chat/completions", json={"model": "tiny-text", "messages": 3})
        assert wrong.status_code == 400 and wrong.json()["error"]["param"] == "messages"
        empty = http.post("/v1/chat/completions", json={"model": "tiny-text", "messages": []})
        assert empty.status_code == 400
        assert http.get("/v1/nothing").json()["error"]["type"] == "not_found_error"


def test_the_engine_survives_refusals(client):
    ok = client.chat.completions.create(model="tiny-text", messages=ASK, max_tokens=3)
    assert ok.usage.completion_tokens == 3


def test_api_key_is_required_when_set(guarded):
    body = _refused(lambda: guarded.client("wrong").models.list(), openai.AuthenticationError)
    assert body["code"] == "invalid_api_key"
    assert [m.id for m in guarded.client("sesame").models.list().data] == [
        "tiny-agent", "tiny-text"]
    assert httpx.get(f"{guarded.url}/health").status_code == 200  # liveness needs no key


def test_body_size_limit_is_413(guarded):
    big = [{"role": "user", "content": "x" * 5000}]
    with pytest.raises(openai.APIStatusError) as error:
        guarded.client("sesame").chat.completions.create(model="tiny-text", messages=big)
    assert error.value.status_code == 413
    assert error.value.body["code"] == "request_too_large"
    # A chunked body (no content-length) is cut off as it arrives.
    chunks = (part for part in [b'{"model": "tiny-text", "messages": [', b" " * 5000, b"]}"])
    response = httpx.post(f"{guarded.url}/v1/chat/completions", content=chunks,
                          headers={"authorization": "Bearer sesame",
                                   "content-type": "application/json"})
    assert response.status_code == 413


def test_concurrency_limit_is_429(guarded, stack):
    client = guarded.client("sesame")
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        with stack.engine.paused():
            first = pool.submit(client.chat.completions.create, model="tiny-text",
                                messages=ASK, max_tokens=2)
            wait_until(lambda: guarded.counters.in_flight == 1)
            body = _refused(lambda: client.chat.completions.create(
                model="tiny-text", messages=ASK, max_tokens=2), openai.RateLimitError)
            assert body["code"] == "rate_limit_exceeded"
        assert first.result().usage.completion_tokens == 2
    wait_until(lambda: guarded.counters.in_flight == 0)
    assert client.chat.completions.create(model="tiny-text", messages=ASK,
                                          max_tokens=1).usage.completion_tokens == 1
