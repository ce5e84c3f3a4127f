"""The grammars of constrained requests (serving/grammars.py), walked token by token at random
over a real tokenizer: every answer a walk completes is one the request allows. Both ways of
writing the call tags: as text (a vocabulary without `<tool_call>`, SmolLM2's) and as one
token (Qwen's)."""

import json
import random

import numpy as np
import pytest

from agentrl_jax.chat.scratch_tokenizer import train_chat_tokenizer
from agentrl_jax.chat.tool_parsers import ParsedTurn, get_parser
from agentrl_jax.sampling.constraint import GrammarCompiler, bitmask_words
from agentrl_jax.serving import errors
from agentrl_jax.serving.grammars import request_grammar

CITY = {"type": "object", "additionalProperties": False, "required": ["city"],
        "properties": {"city": {"enum": ["Paris", "Rome"]}}}
ZONE = {"type": "object", "additionalProperties": False, "required": ["zone"],
        "properties": {"zone": {"enum": ["UTC", "CET"]}}}
WEATHER = {"type": "function",
           "function": {"name": "get_weather", "parameters": CITY, "strict": True}}
TIME = {"type": "function", "function": {"name": "get_time", "parameters": ZONE}}


@pytest.fixture(scope="module", params=["text tags", "token tags"])
def compiler(request):
    texts = ['<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>',
             "The weather in Rome is fine. UTC CET get_time"] * 40
    tokenizer = train_chat_tokenizer(texts, vocab_size=600)
    if request.param == "token tags":
        tokenizer.add_tokens(["<tool_call>", "</tool_call>"])
    end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    return GrammarCompiler(tokenizer, [end]), tokenizer, end


def walks(compiler, grammar: str, count: int = 12, limit: int = 80) -> list[str]:
    """The answers of `count` random walks that end within `limit` tokens: each token drawn
    uniformly among those allowed, the end token (once allowed) one time in four."""
    grammars, tokenizer, end = compiler
    done = []
    for seed in range(count):
        rng, g = random.Random(seed), grammars.lark(grammar)
        mask, tokens = np.zeros(bitmask_words(len(tokenizer)), np.int32), []
        for _ in range(limit):
            g.fill_bitmask(mask)
            allowed = np.flatnonzero(np.unpackbits(mask.view(np.uint8), bitorder="little"))
            token = end if end in allowed and rng.random() < 0.25 else int(rng.choice(allowed))
            if token == end:
                done.append(tokenizer.decode(tokens, skip_special_tokens=False))
                break
            g.consume(token)
            tokens.append(token)
    assert done, "no walk ended"
    return done


def calls(text: str) -> list[tuple[str, dict]]:
    parsed = get_parser("hermes").parse(text)
    assert isinstance(parsed, ParsedTurn), text
    return [(c["function"]["name"], json.loads(c["function"]["arguments"]))
            for c in parsed.tool_calls]


def test_required_calls_are_valid_calls(compiler):
    grammar = request_grammar("hermes", [WEATHER, TIME], "required", None, None,
                              compiler[0].literal)
    for text in walks(compiler, grammar):
        made = calls(text)
        assert made and all(args in ({"city": "Paris"}, {"city": "Rome"},
                                     {"zone": "UTC"}, {"zone": "CET"}) for _, args in made)


def test_a_named_function_without_parallel_calls_is_called_once(compiler):
    choice = {"type": "function", "function": {"name": "get_time"}}
    grammar = request_grammar("hermes", [WEATHER, TIME], choice, False, None,
                              compiler[0].literal)
    for text in walks(compiler, grammar):
        ((name, args),) = calls(text)
        assert name == "get_time" and args["zone"] in ("UTC", "CET")


def test_auto_with_a_strict_tool_leaves_text_free_but_no_malformed_call(compiler):
    grammar = request_grammar("hermes", [WEATHER], "auto", None, None, compiler[0].literal)
    texts = walks(compiler, grammar, count=40)
    for text in texts:
        for name, args in calls(text):   # any call it opened is complete and valid
            assert name == "get_weather" and args["city"] in ("Paris", "Rome")
    assert any(not calls(t) for t in texts)   # and text alone is an answer


def accepts(compiler, grammar: str, text: str) -> bool:
    """Whether `text` (the tokenizer's own tokens) is a whole answer: each token allowed, and
    then the end."""
    grammars, tokenizer, end = compiler
    g = grammars.lark(grammar)
    mask = np.zeros(bitmask_words(len(tokenizer)), np.int32)
    for token in [*tokenizer.encode(text, add_special_tokens=False), end]:
        g.fill_bitmask(mask)
        if not mask[token // 32] >> (token % 32) & 1:
            return False
        g.consume(token)
    return True


def test_a_json_answer_or_calls(compiler):
    schema = {"type": "object", "required": ["n"], "additionalProperties": False,
              "properties": {"n": {"type": "integer", "minimum": 0, "maximum": 9}}}
    grammar = request_grammar("hermes", [WEATHER], "auto", None,
                              {"type": "json_schema", "json_schema": {"schema": schema}},
                              compiler[0].literal)
    call = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "%s"}}\n</tool_call>'
    assert accepts(compiler, grammar, '{"n": 3}')
    assert accepts(compiler, grammar, "Let me look. " + call % "Rome")
    assert not accepts(compiler, grammar, '{"n": 12}')
    assert not accepts(compiler, grammar, "The weather is fine.")
    assert not accepts(compiler, grammar, call % "Oslo")


def test_nothing_to_constrain_is_no_grammar():
    loose = {"type": "function", "function": {"name": "get_time", "parameters": ZONE}}
    assert request_grammar("hermes", [loose], "auto", None, None) is None
    assert request_grammar("hermes", [WEATHER], "none", None, None) is None
    assert request_grammar("glm4", None, None, None, {"type": "json_object"}) is not None
    with pytest.raises(errors.APIError):
        request_grammar("glm4", [WEATHER], "required", None, None)
