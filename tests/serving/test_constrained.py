"""Grammar-constrained answers through the real `openai` client: strict tools, forced and named
calls, one call at most, JSON response formats, on the Responses API and streamed. The tiny
models never write these by themselves (tiny-text says a sentence, tiny-agent one fixed call),
so a valid answer is the grammar's doing."""

import json

import openai
import pytest

from launch.demo import WEATHER_TOOL

ASK = [{"role": "user", "content": "What is the weather in Paris?"}]
# Bounded strings and numbers: a model that never closes a string by itself must still finish.
TRIP = {"type": "object", "additionalProperties": False, "required": ["city", "days"],
        "properties": {"city": {"type": "string", "maxLength": 12},
                       "days": {"type": "integer", "minimum": 1, "maximum": 7}}}
PLAN_TRIP = {"type": "function", "function": {
    "name": "plan_trip", "description": "Plans a trip.", "parameters": TRIP, "strict": True}}
CLOCK = {"type": "object", "additionalProperties": False, "required": ["zone"],
         "properties": {"zone": {"enum": ["UTC", "CET", "JST"]}}}
GET_TIME = {"type": "function", "function": {
    "name": "get_time", "parameters": CLOCK, "strict": True}}


def valid_trip(arguments: str) -> bool:
    args = json.loads(arguments)
    return (set(args) == {"city", "days"} and isinstance(args["city"], str)
            and len(args["city"]) <= 12 and isinstance(args["days"], int)
            and 1 <= args["days"] <= 7)


def _calls(response):
    return [(c.function.name, c.function.arguments) for choice in response.choices
            for c in choice.message.tool_calls or ()]


@pytest.mark.parametrize("model", ["tiny-text", "tiny-agent"])
def test_a_required_call_to_a_strict_tool_follows_its_schema(client, model):
    response = client.chat.completions.create(
        model=model, messages=ASK, tools=[PLAN_TRIP], tool_choice="required", n=4,
        temperature=1.0, seed=3, max_tokens=120)
    for choice in response.choices:
        assert choice.finish_reason == "tool_calls"
        assert choice.message.tool_calls
        for call in choice.message.tool_calls:
            assert call.function.name == "plan_trip" and valid_trip(call.function.arguments)


def test_a_named_function_is_the_one_called_once(client):
    choice = {"type": "function", "function": {"name": "get_time"}}
    response = client.chat.completions.create(
        model="tiny-agent", messages=ASK, tools=[PLAN_TRIP, GET_TIME], tool_choice=choice,
        n=3, temperature=1.0, seed=1, max_tokens=60)
    for c in response.choices:
        (call,) = c.message.tool_calls
        assert call.function.name == "get_time"
        assert json.loads(call.function.arguments)["zone"] in ("UTC", "CET", "JST")


def test_parallel_calls_off_gives_one_call(client):
    response = client.chat.completions.create(
        model="tiny-text", messages=ASK, tools=[PLAN_TRIP, GET_TIME], tool_choice="required",
        parallel_tool_calls=False, n=4, temperature=1.0, seed=5, max_tokens=120)
    assert all(len(c.message.tool_calls) == 1 for c in response.choices)


def test_strict_tools_on_auto_leave_text_free_and_calls_valid(client, stack):
    text = client.chat.completions.create(model="tiny-text", messages=ASK, tools=[GET_TIME],
                                          max_tokens=6, temperature=0)
    assert text.choices[0].message.content == stack.tokenizer.decode(stack.greedy_sentence(6))
    assert text.choices[0].message.tool_calls is None
    # tiny-agent opens its call to get_weather; strict get_time is the only function offered
    # in the grammar's call, so the call it opens becomes a valid call of it.
    called = client.chat.completions.create(model="tiny-agent", messages=ASK, tools=[GET_TIME],
                                            max_tokens=60, temperature=0)
    (call,) = called.choices[0].message.tool_calls
    assert call.function.name == "get_time" and json.loads(call.function.arguments)["zone"]


def test_a_json_schema_response_format_gives_valid_documents(client):
    response = client.chat.completions.create(
        model="tiny-text", messages=ASK, n=4, temperature=1.0, seed=2, max_tokens=60,
        response_format={"type": "json_schema",
                         "json_schema": {"name": "trip", "schema": TRIP, "strict": True}})
    for choice in response.choices:
        assert choice.finish_reason == "stop" and valid_trip(choice.message.content)


def test_a_json_object_response_format_gives_objects(client):
    # Any object: a random walk rarely closes one, so each is an object or one cut short.
    response = client.chat.completions.create(
        model="tiny-text", messages=ASK, n=4, temperature=1.0, seed=4, max_tokens=24,
        response_format={"type": "json_object"})
    for choice in response.choices:
        assert choice.message.content.startswith("{")
        if choice.finish_reason == "stop":
            assert isinstance(json.loads(choice.message.content), dict)
        else:
            assert choice.finish_reason == "length"


def test_a_streamed_forced_call_assembles_into_valid_arguments(client):
    stream = client.chat.completions.create(
        model="tiny-text", messages=ASK, tools=[PLAN_TRIP], tool_choice="required",
        temperature=1.0, seed=7, max_tokens=120, stream=True)
    arguments, name, finish = "", None, None
    for chunk in stream:
        if not chunk.choices:
            continue
        for delta in chunk.choices[0].delta.tool_calls or ():
            name = delta.function.name or name
            arguments += delta.function.arguments or ""
        finish = chunk.choices[0].finish_reason or finish
    assert (name, finish) == ("plan_trip", "tool_calls") and valid_trip(arguments)


def test_the_responses_api_forces_calls_and_formats(client):
    flat = {"type": "function", **PLAN_TRIP["function"]}
    called = client.responses.create(model="tiny-text", input="Plan it.", tools=[flat],
                                     tool_choice="required", temperature=1.0,
                                     max_output_tokens=120)
    (item,) = [i for i in called.output if i.type == "function_call"]
    assert item.name == "plan_trip" and valid_trip(item.arguments)
    document = client.responses.create(
        model="tiny-text", input="Plan it.", temperature=1.0, max_output_tokens=60,
        text={"format": {"type": "json_schema", "name": "trip", "schema": TRIP,
                         "strict": True}})
    assert valid_trip(document.output_text)


def test_constrained_turns_are_not_recorded_in_trajectories(client):
    with pytest.raises(openai.BadRequestError) as refused:
        client.chat.completions.create(model="tiny-agent", messages=ASK, tools=[PLAN_TRIP],
                                       tool_choice="required",
                                       extra_body={"trajectory_id": "constrained-1"})
    assert refused.value.body["code"] == "constrained_trajectory"
    # The same tools unconstrained are recorded as before.
    plain = client.chat.completions.create(model="tiny-agent", messages=ASK,
                                           tools=[WEATHER_TOOL],
                                           extra_body={"trajectory_id": "constrained-1"})
    assert plain.choices[0].message.tool_calls


def test_a_schema_the_grammar_library_cannot_serve_is_400(client):
    odd = {"type": "object", "properties": {"a": {"type": "string", "pattern": "(?<=x)a"}}}
    with pytest.raises(openai.BadRequestError) as refused:
        client.chat.completions.create(
            model="tiny-text", messages=ASK,
            response_format={"type": "json_schema", "json_schema": {"name": "x", "schema": odd}})
    assert refused.value.body["code"] == "invalid_schema"


def test_strict_changes_the_sampling_not_the_prompt(client):
    """A strict tool is rendered as the same tool without `strict`: agents that send
    `strict: false` (the Agents SDK's non-strict tools) see the environment's prompt."""
    loose = {"type": "function", "function": {
        k: v for k, v in PLAN_TRIP["function"].items() if k != "strict"}}
    prompts = [client.chat.completions.create(
        model="tiny-text", messages=ASK, tools=[tool], tool_choice="none", max_tokens=1
    ).model_extra["agentrl"]["prompt_token_ids"] for tool in (PLAN_TRIP, loose)]
    assert prompts[0] == prompts[1]
