"""The OpenAI routes through the real `openai` client, over HTTP, on the real engine."""

import asyncio
import json

import httpx
import pytest

from agentrl_jax.sampling import GenerateRequest, SamplingParams
from launch.demo import WEATHER_TOOL
from tests.serving.conftest import wait_until

ASK = [{"role": "user", "content": "What is the weather in Paris?"}]


def _ext(response):
    return response.model_extra["agentrl"]


def test_models_lists_the_served_names(client):
    names = {m.id: m.model_extra["agentrl"] for m in client.models.list().data}
    assert names == {"tiny-agent": {"policy": "current", "weight_version": 0},
                     "tiny-text": {"policy": "text", "weight_version": 0}}


def test_plain_chat_completion_returns_what_the_engine_samples(client, stack):
    response = client.chat.completions.create(model="tiny-text", messages=ASK, max_tokens=7,
                                              temperature=0, seed=1)
    choice = response.choices[0]
    expected = stack.greedy_sentence(7)
    assert choice.message.role == "assistant"
    assert choice.message.content == stack.tokenizer.decode(expected)
    assert choice.finish_reason == "length" and choice.message.tool_calls is None
    ext = _ext(response)
    assert ext["choices"][0]["completion_token_ids"] == expected
    assert ext["choices"][0]["weight_versions"] == [0] * 7
    assert response.usage.prompt_tokens == len(ext["prompt_token_ids"])
    assert response.usage.completion_tokens == 7
    # The same prompt straight into the engine samples the same tokens and log-probabilities.
    direct = asyncio.run(stack.engine.generate(GenerateRequest(
        ext["prompt_token_ids"], SamplingParams(temperature=0, max_new_tokens=7,
                                                stop_token_ids=(stack.eos,)), "text")))
    assert direct.tokens == expected
    assert ext["choices"][0]["logprobs"] == direct.logprobs
    assert ext["trajectory_id"] is None


def test_tool_calls_are_parsed(client, stack):
    response = client.chat.completions.create(model="tiny-agent", messages=ASK,
                                              tools=[WEATHER_TOOL], temperature=0)
    choice = response.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.content is None
    (call,) = choice.message.tool_calls
    assert call.type == "function" and call.id.startswith("call_")
    assert call.function.name == "get_weather"
    assert json.loads(call.function.arguments) == {"city": "Paris"}
    assert _ext(response)["choices"][0]["completion_token_ids"] == stack.tool_ids
    # Without tools the same text is the content, unparsed.
    plain = client.chat.completions.create(model="tiny-agent", messages=ASK, temperature=0)
    assert plain.choices[0].message.content.startswith("<tool_call>")
    assert plain.choices[0].finish_reason == "stop"


def test_logprobs_are_the_sampled_tokens(client, stack):
    response = client.chat.completions.create(model="tiny-text", messages=ASK, max_tokens=5,
                                              temperature=1.0, seed=4, logprobs=True)
    content = response.choices[0].logprobs.content
    ext = _ext(response)["choices"][0]
    assert [c.logprob for c in content] == ext["logprobs"]
    assert [c.token for c in content] == [stack.tokenizer.decode([t])
                                          for t in ext["completion_token_ids"]]
    assert all(c.top_logprobs == [] for c in content)


def test_streamed_chunks_reassemble_the_completion(client):
    kwargs = dict(model="tiny-text", messages=ASK, max_tokens=11, temperature=0, seed=5)
    whole = client.chat.completions.create(**kwargs)
    chunks = list(client.chat.completions.create(stream=True, **kwargs,
                                                 stream_options={"include_usage": True}))
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == whole.choices[0].message.content
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices]
    assert finishes[-1] == "length" and set(finishes[:-1]) == {None}
    last = chunks[-1]
    assert last.choices == [] and last.usage.completion_tokens == 11
    assert (_ext(last)["choices"][0]["completion_token_ids"]
            == _ext(whole)["choices"][0]["completion_token_ids"])


def test_streamed_tool_call(client):
    stream = client.chat.completions.create(model="tiny-agent", messages=ASK,
                                            tools=[WEATHER_TOOL], temperature=0, stream=True)
    chunks = list(stream)
    calls = [tc for c in chunks if c.choices for tc in (c.choices[0].delta.tool_calls or [])]
    assert [(tc.index, tc.function.name) for tc in calls] == [(0, "get_weather")]
    assert json.loads(calls[0].function.arguments) == {"city": "Paris"}
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "tool_calls"


def test_n_choices_are_seeded_samples(client, stack):
    kwargs = dict(model="tiny-text", messages=ASK, max_tokens=30, temperature=1.0, seed=11, n=4)
    first = client.chat.completions.create(**kwargs)
    again = client.chat.completions.create(**kwargs)
    texts = [c.message.content for c in first.choices]
    assert [c.index for c in first.choices] == [0, 1, 2, 3]
    assert len(set(texts)) > 1  # each choice samples its own branches
    assert texts == [c.message.content for c in again.choices]
    for choice, ext in zip(first.choices, _ext(first)["choices"], strict=True):
        assert choice.message.content == stack.tokenizer.decode(ext["completion_token_ids"])
    assert first.usage.completion_tokens == 4 * 30


def test_stop_strings_end_the_text_before_them(client, stack):
    response = client.chat.completions.create(model="tiny-text", messages=ASK, max_tokens=30,
                                              temperature=0, stop=[" friend"])
    choice = response.choices[0]
    assert choice.finish_reason == "stop"
    assert choice.message.content == "Hello there,"
    # The sampled tokens still include the one that completed the stop string.
    tokens = _ext(response)["choices"][0]["completion_token_ids"]
    assert stack.tokenizer.decode(tokens) == "Hello there, friend"


def test_completions_take_text_or_token_ids(client, stack):
    text = client.completions.create(model="tiny-text", prompt="Hello", max_tokens=3,
                                     temperature=0, logprobs=0)
    assert text.choices[0].text == stack.tokenizer.decode(
        [stack.sentence[1][0], stack.sentence[2][0], stack.sentence[3][0]])
    assert text.choices[0].logprobs.token_logprobs == _ext(text)["choices"][0]["logprobs"]
    ids = client.completions.create(model="tiny-text", prompt=[stack.sentence[0][0]],
                                    max_tokens=3, temperature=0)
    assert ids.choices[0].text == text.choices[0].text
    assert _ext(ids)["prompt_token_ids"] == [stack.sentence[0][0]]
    streamed = client.completions.create(model="tiny-text", prompt="Hello", max_tokens=3,
                                         temperature=0, stream=True)
    assert "".join(c.choices[0].text for c in streamed if c.choices) == text.choices[0].text


def test_a_disconnected_stream_frees_its_slot(server, stack, client):
    body = {"model": "tiny-text", "messages": ASK, "max_tokens": 400, "stream": True}
    before = server.counters.disconnected
    with stack.engine.paused():  # the request queues behind the held loop
        with httpx.Client(base_url=server.url) as http:
            with http.stream("POST", "/v1/chat/completions", json=body) as response:
                first = next(response.iter_lines())
                assert first.startswith("data: ")
        wait_until(lambda: server.counters.disconnected == before + 1)
        wait_until(lambda: server.counters.in_flight == 0)
    # A round trip through the engine loop runs after the queued submit and its cancel: the
    # 400-token request is gone, not decoding.
    asyncio.run(stack.engine.policies())
    assert not stack.engine.engine.has_work
    # The engine goes on serving.
    again = client.chat.completions.create(model="tiny-text", messages=ASK, max_tokens=2)
    assert again.usage.completion_tokens == 2


def test_a_client_that_gives_up_on_a_request_cancels_it(server, stack):
    body = {"model": "tiny-text", "messages": ASK, "max_tokens": 400}
    before = server.counters.disconnected
    with stack.engine.paused():  # held: the request cannot finish before the client leaves
        with pytest.raises(httpx.ReadTimeout):
            httpx.post(f"{server.url}/v1/chat/completions", json=body,
                       timeout=httpx.Timeout(30.0, read=0.5))
        wait_until(lambda: server.counters.disconnected == before + 1)
        wait_until(lambda: server.counters.in_flight == 0)
    asyncio.run(stack.engine.policies())
    assert not stack.engine.engine.has_work
