"""Tool-call parsers: Hermes/Qwen2.5 and GLM-4-0414 formats, malformed output, fuzzing."""

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentrl_jax.chat.tool_parsers import (
    Glm4Parser,
    HermesParser,
    ParsedTurn,
    ToolParseError,
    get_parser,
    partial_marker,
    settled_content,
)


def call(i, name, args):
    return {"id": str(i), "type": "function",
            "function": {"name": name, "arguments": json.dumps(args, ensure_ascii=False)}}


# -- Hermes / Qwen2.5 ------------------------------------------------------------------------

def test_hermes_single_call():
    text = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
    assert HermesParser().parse(text) == ParsedTurn(
        content="", tool_calls=(call(0, "get_weather", {"city": "Paris"}),)
    )


def test_hermes_several_calls_and_content():
    text = (
        "Let me check both.\n"
        '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>\n'
        '<tool_call>{"name": "get_time", "arguments": {"tz": "Europe/London", "n": [1, 2]}}'
        "</tool_call>\nDone."
    )
    result = HermesParser().parse(text)
    assert result.content == "Let me check both.\nDone."
    assert result.tool_calls == (
        call(0, "get_weather", {"city": "Paris"}),
        call(1, "get_time", {"tz": "Europe/London", "n": [1, 2]}),
    )
    assert result.message() == {
        "role": "assistant", "content": result.content, "tool_calls": list(result.tool_calls)
    }


def test_hermes_plain_text_has_no_calls():
    result = HermesParser().parse("  The answer is 42.\n")
    assert result == ParsedTurn(content="The answer is 42.")
    assert result.message() == {"role": "assistant", "content": "The answer is 42."}


def test_hermes_accepts_list_body_and_string_arguments():
    # SmolLM2 writes a JSON list inside one tag; OpenAI-style arguments may be a JSON string.
    text = ('<tool_call>[{"name": "a", "arguments": {"x": 1}}, '
            '{"name": "b", "arguments": "{\\"y\\": \\"\\u00e9\\"}"}]</tool_call>')
    result = HermesParser().parse(text)
    assert result.tool_calls == (call(0, "a", {"x": 1}), call(1, "b", {"y": "é"}))
    assert result.tool_calls[1]["function"]["arguments"] == '{"y": "é"}'


@pytest.mark.parametrize(
    "text, kind",
    [
        ('<tool_call>{"name": "f", "arguments": {"x": 1}</tool_call>', "bad_json"),
        ("<tool_call>not json at all</tool_call>", "bad_json"),
        ("<tool_call></tool_call>", "bad_json"),
        ('<tool_call>"just a string"</tool_call>', "invalid_call"),
        ("<tool_call>[]</tool_call>", "invalid_call"),
        ('<tool_call>[{"name": "f", "arguments": {}}, 3]</tool_call>', "invalid_call"),
        ('<tool_call>{"arguments": {"x": 1}}</tool_call>', "missing_name"),
        ('<tool_call>{"name": "", "arguments": {}}</tool_call>', "missing_name"),
        ('<tool_call>{"name": 7, "arguments": {}}</tool_call>', "missing_name"),
        ('<tool_call>{"name": "f"}</tool_call>', "arguments_not_object"),
        ('<tool_call>{"name": "f", "arguments": [1, 2]}</tool_call>', "arguments_not_object"),
        ('<tool_call>{"name": "f", "arguments": "x=1"}</tool_call>', "arguments_not_object"),
        ('<tool_call>{"name": "f", "arguments": "[1]"}</tool_call>', "arguments_not_object"),
        ('<tool_call>{"name": "f", "arguments": {}}', "unclosed_tag"),
        ('<tool_call>{"name": "f", "arguments": {}}<tool_call>{}</tool_call>', "unclosed_tag"),
        ('{"name": "f", "arguments": {}}</tool_call>', "unexpected_tag"),
        ('<tool_call>{"name": "f", "arguments": {}}</tool_call></tool_call>', "unexpected_tag"),
        ("<tool_call>" + "[" * 100_000 + "</tool_call>", "bad_json"),
    ],
)
def test_hermes_malformed(text, kind):
    result = HermesParser().parse(text)
    assert isinstance(result, ToolParseError)
    assert result.kind == kind
    assert result.raw == text
    assert result.message


@pytest.mark.parametrize("parser, text", [
    (HermesParser(), '<tool_call>{"name": "f", "arguments": {"x": "\\ud800"}}</tool_call>'),
    (HermesParser(), '<tool_call>{"name": "f", "arguments": "{\\"x\\": \\"\\\\udfff\\"}"}'
                     '</tool_call>'),
    (HermesParser(), '<tool_call>{"name": "f", "arguments": {"x": %s}}</tool_call>'
                     % ("[" * 500 + "]" * 500)),
    (Glm4Parser(), 'f\n{"x": "\\ud800"}'),
    (Glm4Parser(), 'f\n{"x": %s}' % ("[" * 100 + "]" * 100)),
])
def test_calls_that_cannot_travel_as_utf8_json_are_bad_json(parser, text):
    """A lone surrogate escape or absurd nesting is the model's malformed call, not a crash of
    the client that would have to encode it (UTF-8 cannot) or of the worker that would parse it."""
    result = parser.parse(text)
    assert isinstance(result, ToolParseError) and result.kind == "bad_json", result


def test_surrogate_pairs_and_moderate_nesting_still_parse():
    text = ('<tool_call>{"name": "f", "arguments": {"x": "\\ud83d\\ude00", "y": %s}}'
            '</tool_call>' % ("[" * 60 + "]" * 60))
    result = HermesParser().parse(text)
    assert isinstance(result, ParsedTurn)
    assert json.loads(result.tool_calls[0]["function"]["arguments"])["x"] == "\U0001f600"


def test_one_bad_call_fails_the_turn():
    text = ('<tool_call>{"name": "f", "arguments": {}}</tool_call>'
            '<tool_call>{"name": "g", "arguments": 3}</tool_call>')
    assert HermesParser().parse(text).kind == "arguments_not_object"


# -- GLM-4-0414 ------------------------------------------------------------------------------

def test_glm4_single_call():
    result = Glm4Parser().parse('get_weather\n{"city": "Paris"}')
    assert result == ParsedTurn(content="", tool_calls=(call(0, "get_weather", {"city": "Paris"}),))


def test_glm4_call_with_stop_marker_and_multiline_json():
    text = 'get_weather\n{\n    "city": "Paris",\n    "days": 2\n}<|observation|>'
    result = Glm4Parser().parse(text)
    assert result.tool_calls == (call(0, "get_weather", {"city": "Paris", "days": 2}),)


def test_glm4_several_calls_separated_by_assistant_token():
    text = 'get_weather\n{"city": "Paris"}<|assistant|>get_time\n{"tz": "CET"}<|observation|>'
    result = Glm4Parser().parse(text)
    assert result.tool_calls == (
        call(0, "get_weather", {"city": "Paris"}), call(1, "get_time", {"tz": "CET"}),
    )
    assert result.content == ""


def test_glm4_content_then_call():
    text = '\nI will look it up.<|assistant|>get_weather\n{"city": "Paris"}'
    result = Glm4Parser().parse(text)
    assert result.content == "I will look it up."
    assert result.tool_calls == (call(0, "get_weather", {"city": "Paris"}),)


@pytest.mark.parametrize(
    "text",
    ["\nParis is sunny today.", "Sure.", "Paris\nLondon", "Here it is:\n{not json",
     "\nget_weather\n{\"city\": \"Paris\"}"],
)
def test_glm4_plain_content(text):
    result = Glm4Parser().parse(text)
    assert result == ParsedTurn(content=text.strip())


@pytest.mark.parametrize(
    "text, kind",
    [
        ('get_weather\n{"city": "Paris"', "bad_json"),
        ("get_weather\n{city: Paris}", "bad_json"),
        ('{"city": "Paris"}', "missing_name"),
        ("get_weather\n[1, 2]", "arguments_not_object"),
    ],
)
def test_glm4_malformed(text, kind):
    result = Glm4Parser().parse(text)
    assert isinstance(result, ToolParseError) and result.kind == kind and result.raw == text


# -- registry and fuzzing --------------------------------------------------------------------

def test_registry():
    assert isinstance(get_parser("hermes"), HermesParser)
    assert isinstance(get_parser("qwen25"), HermesParser)
    assert isinstance(get_parser("glm4"), Glm4Parser)
    with pytest.raises(ValueError, match="hermes"):
        get_parser("nope")


FRAGMENTS = st.sampled_from([
    "<tool_call>", "</tool_call>", "<|assistant|>", "<|observation|>", "{", "}", "[", "]",
    '"name"', '"arguments"', ":", ",", '"f"', "\n", " ", "get_weather", "1", "null", '"',
    "\\", "é", "\x00",
])
JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=5),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=8,
)
# Nearly-valid calls in either format, possibly truncated: exercises the deeper code paths.
CALLS = st.builds(
    lambda name, args, glm, cut: (
        f"{name}\n{json.dumps(args)}" if glm
        else "<tool_call>" + json.dumps({"name": name, "arguments": args}) + "</tool_call>"
    )[:cut],
    st.sampled_from(["f", "get_weather", "", " x "]), JSON, st.booleans(), st.integers(0, 200),
)
TEXT = st.one_of(
    st.text(), st.lists(FRAGMENTS | st.text(max_size=3) | CALLS, max_size=8).map("".join)
)


@settings(max_examples=400, deadline=None)
@given(text=TEXT, name=st.sampled_from(["hermes", "glm4"]))
def test_parsers_never_raise(text, name):
    result = get_parser(name).parse(text)
    assert isinstance(result, ParsedTurn | ToolParseError)
    if isinstance(result, ParsedTurn):
        for i, tool_call in enumerate(result.tool_calls):
            assert tool_call["id"] == str(i)
            assert isinstance(json.loads(tool_call["function"]["arguments"]), dict)
            assert tool_call["function"]["name"]
    else:
        assert result.raw == text


@settings(max_examples=300, deadline=None)
@given(text=TEXT, name=st.sampled_from(["hermes", "glm4"]))
def test_settled_content_begins_every_continuation(text, name):
    """What a stream may send of a turn still being sampled begins its text and, if it parses,
    the parsed content, wherever the turn is cut."""
    parser = get_parser(name)
    result = parser.parse(text)
    for cut in range(len(text) + 1):
        settled = settled_content(parser, text[:cut])
        assert text.startswith(settled)
        if isinstance(result, ParsedTurn):
            assert result.content.startswith(settled)


def test_hermes_settles_the_content_before_a_call():
    parser = HermesParser()
    assert parser.settled("Let me look.\n<tool") == "Let me look."
    assert parser.settled("Let me look.\n<tool_call>{") == "Let me look."
    assert parser.settled(" leading space") == ""
    assert settled_content(Glm4Parser(), "\nplain") == ""
    assert partial_marker("abc <tool_c", "<tool_call>") == len("<tool_c")
    assert partial_marker("abc", "<tool_call>") == 0
