"""Token-by-token streaming over HTTP: text is sent while the turn is still decoding (checked
against how far the held engine has got, not against the clock), the chunks put together are
the non-streamed completion, stops and tool calls are never sent early, the trajectory keeps
the sampled tokens, and a client that leaves mid-stream frees its slot."""

import contextlib
import json

import httpx

from agentrl_jax.sampling import FinishReason, GenerationResult, SamplingParams, TokenEvent
from agentrl_jax.serving.responses import StreamedChoice
from launch.demo import WEATHER_TOOL
from tests.serving.conftest import TOOL_CALL, wait_until

ASK = [{"role": "user", "content": "What is the weather in Paris?"}]


def _ext(chunk):
    return chunk.model_extra["agentrl"]


def _events(response):
    """The decoded `data:` payloads of a server-sent-event response, as they arrive."""
    for line in response.iter_lines():
        if line.startswith("data: "):
            payload = line[len("data: "):]
            yield payload if payload == "[DONE]" else json.loads(payload)


def test_a_stream_sends_text_while_its_turn_is_decoding(server, stack, client):
    body = {"model": "tiny-text", "messages": ASK, "max_tokens": 20, "temperature": 0,
            "stream": True}
    greedy = stack.greedy_sentence(20)
    decode = stack.tokenizer.decode
    with httpx.Client(base_url=server.url, timeout=60) as http, \
            contextlib.ExitStack() as held:
        stepper = held.enter_context(stack.engine.stepping())
        with http.stream("POST", "/v1/chat/completions", json=body) as response:
            events = _events(response)
            assert next(events)["choices"][0]["delta"]["role"] == "assistant"
            stepper.until_submitted()
            sent = ""
            # The first step samples 5 tokens (the prefill's, then 4 decode steps), the next 4.
            for reported in (5, 9):
                stepper.step()
                while sent != decode(greedy[:reported]):  # the text of each host sync
                    (choice,) = next(events)["choices"]
                    assert choice["finish_reason"] is None
                    sent += choice["delta"]["content"]
                    assert decode(greedy[:reported]).startswith(sent)
                # The loop is held between two steps: the request is still decoding.
                assert stack.engine.engine.num_running == 1
            held.close()  # the loop runs freely again
            rest = list(events)
    assert rest[-1] == "[DONE]"
    final = rest[-2]
    assert final["choices"] == []
    assert final["agentrl"]["choices"][0]["completion_token_ids"] == greedy
    finishes = [c["choices"][0]["finish_reason"] for c in rest[:-2]]
    assert finishes[-1] == "length" and set(finishes[:-1]) == {None}
    streamed = sent + "".join(c["choices"][0]["delta"].get("content") or ""
                                       for c in rest[:-2])
    whole = client.chat.completions.create(model="tiny-text", messages=ASK, max_tokens=20,
                                           temperature=0)
    assert streamed == whole.choices[0].message.content == decode(greedy)
    assert _ext(whole)["choices"][0]["completion_token_ids"] == greedy


def test_seeded_streams_put_together_are_the_completion(client):
    kwargs = dict(model="tiny-text", messages=ASK, max_tokens=40, temperature=1.0, seed=21,
                  n=2, logprobs=True, stop=[" you?"])
    whole = client.chat.completions.create(**kwargs)
    chunks = list(client.chat.completions.create(stream=True, **kwargs))
    for i, expected in enumerate(whole.choices):
        mine = [c.choices[0] for c in chunks if c.choices and c.choices[0].index == i]
        assert "".join(c.delta.content or "" for c in mine) == expected.message.content
        assert sum(1 for c in mine if c.delta.content) >= 2  # sent over several host syncs
        logprobs = [e.logprob for c in mine if c.logprobs for e in c.logprobs.content]
        assert logprobs == [e.logprob for e in expected.logprobs.content]
        assert mine[-1].finish_reason == expected.finish_reason == "stop"
        assert (_ext(chunks[-1])["choices"][i]["completion_token_ids"]
                == _ext(whole)["choices"][i]["completion_token_ids"])


def test_text_that_may_begin_a_stop_string_is_held_back(client, stack):
    # ". How" spans the 5th and 6th tokens, which two host syncs report: the first ends on
    # "." while the turn goes on. Had the "." been sent, the text could not end before the
    # stop string (the stream would end with an error instead).
    kwargs = dict(model="tiny-text", messages=ASK, max_tokens=20, temperature=0,
                  stop=[". How"])
    chunks = list(client.chat.completions.create(stream=True, **kwargs))
    contents = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert contents == "Hello there, friend"
    whole = client.chat.completions.create(**kwargs)
    assert whole.choices[0].message.content == "Hello there, friend"
    tokens = _ext(chunks[-1])["choices"][0]["completion_token_ids"]
    assert tokens == _ext(whole)["choices"][0]["completion_token_ids"]
    assert stack.tokenizer.decode(tokens) == "Hello there, friend. How"


def test_a_streamed_tool_call_keeps_the_sampled_tokens(server, client, stack):
    chunks = list(client.chat.completions.create(
        model="tiny-agent", messages=ASK, tools=[WEATHER_TOOL], temperature=0, stream=True,
        extra_body={"trajectory_id": "streamed-call"}))
    deltas = [c.choices[0].delta for c in chunks if c.choices]
    assert not any(d.content for d in deltas)  # the call's markup is never sent as text
    calls = [tc for d in deltas for tc in (d.tool_calls or [])]
    assert [tc.function.name for tc in calls] == ["get_weather"]
    ext = _ext(chunks[-1])
    assert ext["choices"][0]["completion_token_ids"] == stack.tool_ids
    done = httpx.post(f"{server.url}/v1/trajectories/streamed-call/reward",
                      json={"reward": 1.0})
    assert done.status_code == 200
    (rollout,) = [r for r in server.service.trajectories.pop_finished()
                  if r.index == "streamed-call"]
    assert rollout.tokens[rollout.loss_mask == 1].tolist() == stack.tool_ids
    assert rollout.tokens.tolist() == ext["prompt_token_ids"] + stack.tool_ids
    assert rollout.logprobs[rollout.loss_mask == 1].tolist() == ext["choices"][0]["logprobs"]


def test_settled_text_is_a_beginning_of_the_returned_content(stack):
    service = stack.service()
    tok = stack.tokenizer
    params = SamplingParams(stop_token_ids=(stack.eos,))
    tokens = tok.encode("Hello there.\n" + TOOL_CALL, add_special_tokens=False) + [stack.eos]
    result = GenerationResult(tokens, [0.0] * len(tokens), [0] * len(tokens), "current",
                              FinishReason.STOP)
    parsed = service._chat_choice(result, parse=True)
    assert parsed.message["content"] == "Hello there." and parsed.message["tool_calls"]
    plain = service._chat_choice(result, parse=False)
    settled = [service.settled_text(tokens[:k], params, parse=True)
               for k in range(len(tokens) + 1)]
    assert all(parsed.message["content"].startswith(s) for s in settled)
    assert settled[-1] == "Hello there."  # the content streams; the call waits for the end
    unparsed = [service.settled_text(tokens[:k], params, parse=False)
                for k in range(len(tokens) + 1)]
    assert all(plain.message["content"].startswith(s) for s in unparsed)
    assert unparsed[-1] == plain.message["content"]


def test_a_rewound_stream_cannot_be_finished(stack):
    service = stack.service()
    choice = StreamedChoice(service, SamplingParams(), parse=False)
    first = stack.greedy_sentence(3)
    choice.add(TokenEvent(0, first, [0.0] * 3, 0))
    assert choice.delta() == stack.tokenizer.decode(first)
    choice.unreported()
    choice.add(TokenEvent(0, first[:1], [0.0], 1))  # a restart on new weights
    assert choice.rest(stack.tokenizer.decode(first)) is None


def test_a_client_leaving_mid_stream_frees_its_slot(server, stack, client):
    body = {"model": "tiny-text", "messages": ASK, "max_tokens": 400, "stream": True}
    before = server.counters.disconnected
    with stack.engine.stepping() as stepper:
        with httpx.Client(base_url=server.url, timeout=60) as http:
            with http.stream("POST", "/v1/chat/completions", json=body) as response:
                events = _events(response)
                next(events)  # the role
                stepper.until_submitted()
                stepper.step()
                assert next(events)["choices"][0]["delta"]["content"]  # text has come
                assert stack.engine.engine.num_running == 1
        # Gone after its first text: the server cancels the request in the engine.
        wait_until(lambda: server.counters.disconnected == before + 1)
        wait_until(lambda: server.counters.in_flight == 0)
        wait_until(lambda: (stepper.pump(), not stack.engine.engine.has_work)[1])
    again = client.chat.completions.create(model="tiny-text", messages=ASK, max_tokens=2)
    assert again.usage.completion_tokens == 2
