"""The Responses API (`POST /v1/responses`) through the real `openai` client: the same prompt,
samples and token-exact trajectories as the chat path, output items a client can replay, the
typed stream, and clear refusals of what a stateless server cannot do."""

import json

import openai
import pytest

from agentrl_jax.sampling import FinishReason, GenerationResult, SamplingParams, TokenEvent
from agentrl_jax.serving.responses import StreamedChoice
from agentrl_jax.serving.responses_api import ResponseStream
from agentrl_jax.serving.schemas import ResponsesRequest
from agentrl_jax.serving.service import Choice, Outcome
from launch.demo import WEATHER_TOOL
from tests.serving.conftest import TOOL_CALL

QUESTION = "What is the weather in Paris?"
ASK = [{"role": "user", "content": QUESTION}]
# The Responses API's function tools are flat: no "function" wrapper.
FLAT_WEATHER = {"type": "function", **WEATHER_TOOL["function"]}


def _ext(response):
    return response.model_extra["agentrl"]


def test_text_is_what_the_chat_path_samples_for_the_same_conversation(client, stack):
    response = client.responses.create(model="tiny-text", input=QUESTION,
                                       instructions="Be brief.", max_output_tokens=7,
                                       temperature=0)
    chat = client.chat.completions.create(
        model="tiny-text", messages=[{"role": "system", "content": "Be brief."}, *ASK],
        max_tokens=7, temperature=0)
    expected = stack.greedy_sentence(7)
    assert response.output_text == stack.tokenizer.decode(expected)
    (item,) = response.output
    assert item.type == "message" and item.role == "assistant"
    assert response.status == "incomplete"   # it stopped at max_output_tokens
    assert response.incomplete_details.reason == "max_output_tokens"
    ext = _ext(response)
    assert ext["prompt_token_ids"] == chat.model_extra["agentrl"]["prompt_token_ids"]
    assert ext["choices"][0]["completion_token_ids"] == expected
    assert response.usage.input_tokens == len(ext["prompt_token_ids"])
    assert response.usage.output_tokens == 7


def test_input_items_render_as_the_messages_they_mean(client):
    items = [{"role": "system", "content": "Be brief."},
             {"type": "message", "role": "user",
              "content": [{"type": "input_text", "text": "What is the weather "},
                          {"type": "input_text", "text": "in Paris?"}]}]
    response = client.responses.create(model="tiny-text", input=items, max_output_tokens=1)
    chat = client.chat.completions.create(
        model="tiny-text", messages=[{"role": "system", "content": "Be brief."}, *ASK],
        max_tokens=1)
    assert _ext(response)["prompt_token_ids"] == chat.model_extra["agentrl"]["prompt_token_ids"]


def test_a_tool_call_is_a_function_call_item_and_its_replay_continues_the_trajectory(
        client, stack):
    first = client.responses.create(model="tiny-agent", input=QUESTION, tools=[FLAT_WEATHER],
                                    temperature=0, extra_body={"trajectory_id": "resp-a"})
    assert first.status == "completed"
    (call,) = first.output
    assert call.type == "function_call" and call.name == "get_weather"
    assert json.loads(call.arguments) == {"city": "Paris"}
    ext1 = _ext(first)
    sampled = ext1["choices"][0]["completion_token_ids"]
    assert sampled == stack.tool_ids
    # The call's tokens are not the tokenizer's encoding of its text: only the trajectory
    # keeps them, so the replay below proves the items map back to the sampled message.
    assert stack.tokenizer.encode(TOOL_CALL, add_special_tokens=False) != sampled[:-1]

    replay = [{"role": "user", "content": QUESTION},
              *[item.model_dump(exclude_none=True) for item in first.output],
              {"type": "function_call_output", "call_id": call.call_id,
               "output": "sunny, 21 C"}]
    second = client.responses.create(model="tiny-agent", input=replay, tools=[FLAT_WEATHER],
                                     temperature=0, max_output_tokens=4,
                                     extra_headers={"X-Trajectory-Id": "resp-a"})
    ext2 = _ext(second)
    stream = ext1["prompt_token_ids"] + sampled
    assert ext2["trajectory_id"] == "resp-a" and ext2["segment"] == 0   # not an edit
    assert ext2["prompt_token_ids"][: len(stream)] == stream


def _events(stream):
    return [event for event in stream]


def test_a_stream_sends_typed_events_that_add_up_to_the_response(client, stack):
    events = _events(client.responses.create(model="tiny-text", input=QUESTION,
                                             max_output_tokens=9, temperature=0, stream=True))
    kinds = [e.type for e in events]
    assert kinds[:4] == ["response.created", "response.in_progress",
                         "response.output_item.added", "response.content_part.added"]
    assert kinds[-4:] == ["response.output_text.done", "response.content_part.done",
                          "response.output_item.done", "response.incomplete"]
    assert [e.sequence_number for e in events] == list(range(len(events)))
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert text == stack.tokenizer.decode(stack.greedy_sentence(9))
    final = events[-1].response
    assert final.output_text == text
    assert final.model_extra["agentrl"]["choices"][0]["completion_token_ids"] == \
        stack.greedy_sentence(9)


def test_a_streamed_tool_call_ends_with_its_arguments(client):
    events = _events(client.responses.create(model="tiny-agent", input=QUESTION,
                                             tools=[FLAT_WEATHER], temperature=0, stream=True))
    kinds = [e.type for e in events]
    assert "response.output_text.delta" not in kinds   # a call is never sent as text
    (done,) = [e for e in events if e.type == "response.function_call_arguments.done"]
    assert json.loads(done.arguments) == {"city": "Paris"}
    assert kinds[-1] == "response.completed"
    (call,) = events[-1].response.output
    assert call.type == "function_call" and call.id == done.item_id


def test_logprobs_come_with_the_text_when_included(client):
    response = client.responses.create(model="tiny-text", input=QUESTION, max_output_tokens=5,
                                       temperature=1.0,
                                       include=["message.output_text.logprobs"])
    logprobs = response.output[0].content[0].logprobs
    assert [lp.logprob for lp in logprobs] == _ext(response)["choices"][0]["logprobs"]


@pytest.mark.parametrize("change, param", [
    ({"previous_response_id": "resp_123"}, "previous_response_id"),
    ({"input": [{"type": "reasoning", "summary": []}]}, "input[0]"),
    ({"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]},
     "input[0].content[0]"),
    ({"tools": [{"type": "web_search"}]}, "tools[0].type"),
    ({"reasoning": {"effort": "high"}}, "reasoning"),
])
def test_what_a_stateless_server_cannot_do_is_refused_by_name(client, change, param):
    body = {"model": "tiny-text", "input": QUESTION, **change}
    with pytest.raises(openai.BadRequestError) as refused:
        client.responses.create(**body)
    assert refused.value.body["param"] == param


def test_a_stream_whose_text_was_taken_back_ends_with_an_error_event(stack):
    service = stack.service()
    request = ResponsesRequest(model="tiny-text", input=QUESTION, stream=True)
    stream = ResponseStream(request)
    assert stream.opening(1).count("event: ") == 2   # created, in_progress
    sent = StreamedChoice(service, SamplingParams(), parse=False)
    first = stack.greedy_sentence(3)
    sent.add(TokenEvent(0, first, [0.0] * 3, 0))
    assert "response.output_text.delta" in stream.progress(service, 0, sent)
    sent.add(TokenEvent(0, first[:1], [0.0], 1))  # the turn restarted on new weights
    result = GenerationResult(first[:1], [0.0], [1], "text", FinishReason.STOP)
    outcome = Outcome([], [Choice(result, "", {"role": "assistant",
                                               "content": stack.tokenizer.decode(first[:1])})])
    (event,) = list(stream.ending(service, outcome, [sent]))
    kind, data = event.split("\n")[:2]
    assert kind == "event: error"
    body = json.loads(data.removeprefix("data: "))
    assert body["type"] == "error" and body["code"] == "stream_diverged"
    # After created, in_progress, the message's two opening events and the text's delta.
    assert body["sequence_number"] == 5
