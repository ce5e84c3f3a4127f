"""Constrained turns in the engine: every token within its turn's mask, log-probabilities under
the masked distribution, unconstrained turns beside them unchanged, a broken grammar failing
its turn alone; and llguidance's JSON-schema grammar on a real tokenizer."""

import dataclasses
import json

import jax.numpy as jnp
import numpy as np
import pytest

from agentrl_jax.chat.scratch_tokenizer import train_chat_tokenizer
from agentrl_jax.sampling import GenerateRequest, SamplingParams
from agentrl_jax.sampling.constraint import ConstraintError, GrammarCompiler, bitmask_words
from tests.sampling.conftest import (
    make_engine,
    random_prompt,
    reference_greedy,
    reference_logits,
    tiny_model,
)

VOCAB = 128


class Residues:
    """Token i of the turn must be ≡ i (mod 4) and below 64; at `fail_at` no token is allowed.
    Records the tokens it is told."""

    def __init__(self, fail_at: int | None = None):
        self.seen: list[int] = []
        self.fail_at = fail_at

    def allowed(self, step: int) -> np.ndarray:
        return np.array([t for t in range(64) if t % 4 == step % 4])

    def fill_bitmask(self, out: np.ndarray) -> None:
        out[:] = 0
        if len(self.seen) == self.fail_at:
            raise ConstraintError("nothing allowed")
        bits = np.zeros(out.size * 32, np.uint8)
        bits[self.allowed(len(self.seen))] = 1
        out[:] = np.packbits(bits, bitorder="little").view(np.int32)

    def consume(self, token: int) -> None:
        if token not in self.allowed(len(self.seen)):
            raise ConstraintError(f"token {token} not allowed")
        self.seen.append(token)

    def reset(self) -> None:
        self.seen = []


def masked_logprobs(model, prompt, tokens, constraint: Residues, temperature: float):
    """log softmax over each step's allowed tokens of logits / T, from a full forward."""
    logits = reference_logits(model, list(prompt) + list(tokens)).astype(np.float64)
    out = []
    for i, token in enumerate(tokens):
        row = logits[len(prompt) - 1 + i] / temperature
        allowed = constraint.allowed(i)
        top = row[allowed].max()
        out.append(row[token] - top - np.log(np.exp(row[allowed] - top).sum()))
    return out


@pytest.mark.parametrize("temperature", [1.0, 0.0])
def test_constrained_tokens_stay_in_the_mask_with_masked_logprobs(temperature):
    model = tiny_model("llama")
    engine = make_engine(model)
    params = SamplingParams(temperature=temperature, max_new_tokens=10, seed=5)
    prompts = [random_prompt(n, seed=n) for n in (5, 13)]
    constraints = [Residues() for _ in prompts]
    results = engine.generate([GenerateRequest(p, params, constraint=c)
                               for p, c in zip(prompts, constraints, strict=True)])
    for prompt, constraint, result in zip(prompts, constraints, results, strict=True):
        assert len(result.tokens) == 10
        assert all(t % 4 == i % 4 and t < 64 for i, t in enumerate(result.tokens))
        assert constraint.seen == result.tokens   # the grammar was told every token
        expected = masked_logprobs(model, prompt, result.tokens, Residues(), temperature or 1.0)
        np.testing.assert_allclose(result.logprobs, expected, atol=2e-4)
    assert engine.stats["constrained_decode_calls"] >= 9  # one step a call


def test_unconstrained_turns_beside_constrained_ones_are_unchanged():
    model = tiny_model("llama")
    engine = make_engine(model)
    greedy = SamplingParams(temperature=0.0, max_new_tokens=10)
    free = [random_prompt(n, seed=n) for n in (4, 9)]
    bound = [random_prompt(n, seed=10 + n) for n in (6, 11)]
    results = engine.generate([GenerateRequest(p, greedy) for p in free]
                              + [GenerateRequest(p, greedy, constraint=Residues()) for p in bound])
    for prompt, result in zip(free, results[:2], strict=True):
        assert result.tokens == reference_greedy(model, prompt, 10)
    for result in results[2:]:
        assert all(t % 4 == i % 4 and t < 64 for i, t in enumerate(result.tokens))
        assert len(result.tokens) == 10   # the same tokens per round as the others


def test_a_grammar_that_allows_nothing_fails_its_turn_alone():
    engine = make_engine(tiny_model("llama"))
    greedy = SamplingParams(temperature=0.0, max_new_tokens=8)
    results: dict[int, object] = {}
    for i, constraint in enumerate([Residues(fail_at=3), None, Residues(fail_at=0)]):
        engine.submit(GenerateRequest(random_prompt(7, seed=i), greedy, constraint=constraint),
                      lambda r, i=i: results.__setitem__(i, r))
    while engine.has_work:
        engine.step()
    assert isinstance(results[0], ConstraintError) and isinstance(results[2], ConstraintError)
    assert len(results[1].tokens) == 8  # type: ignore[attr-defined]
    pages = engine.pages   # nothing leaked: every page is free or a cached prompt prefix
    assert pages.free_pages + pages.cache_pages == pages.num_pages - 1


def test_a_turn_restarted_on_new_weights_starts_its_grammar_again():
    model = tiny_model("llama")
    engine = make_engine(model, in_flight="abort")
    constraint = Residues()
    params = SamplingParams(temperature=0.0, max_new_tokens=12)
    results: list = []
    engine.submit(GenerateRequest(random_prompt(5, seed=1), params, constraint=constraint),
                  results.append)
    engine.step()   # prefill and a round of decode
    engine.update_params(tiny_model("llama", seed=1), version=1)
    while engine.has_work:
        engine.step()
    assert results[0].versions == [1] * 12
    assert constraint.seen == results[0].tokens


# ---- llguidance on a real tokenizer ----------------------------------------------------------

SCHEMA = {"type": "object", "additionalProperties": False, "required": ["city", "days"],
          "properties": {"city": {"enum": ["Paris", "Rome", "Oslo"]},
                         "days": {"type": "integer", "minimum": 1, "maximum": 9}}}


@pytest.fixture(scope="module")
def tokenizer():
    texts = ['{"city": "Paris", "days": 3}', "The weather in Rome and Oslo is fine."] * 50
    return train_chat_tokenizer(texts, vocab_size=400)


def test_a_random_model_under_a_json_schema_writes_valid_documents(tokenizer):
    vocab = len(tokenizer) + 64   # the model's vocabulary may be wider than the tokenizer's
    model = tiny_model("llama", vocab_size=vocab)
    engine = make_engine(model, max_context=128, num_pages=128, context_buckets=(64,))
    end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    compiler = GrammarCompiler(tokenizer, [end])
    prompt = tokenizer.encode("Where to? Answer in JSON.", add_special_tokens=False)
    params = SamplingParams(temperature=1.0, max_new_tokens=40, stop_token_ids=[end])
    requests = [GenerateRequest(prompt, dataclasses.replace(params, seed=s),
                                constraint=compiler.json_schema(SCHEMA)) for s in range(6)]
    for result in engine.generate(requests):
        assert result.tokens[-1] == end and result.finish_reason == "stop"
        document = json.loads(tokenizer.decode(result.tokens[:-1]))
        assert document["city"] in ("Paris", "Rome", "Oslo") and set(document) == {"city", "days"}
        assert isinstance(document["days"], int) and 1 <= document["days"] <= 9
        assert all(t < len(tokenizer) for t in result.tokens)


def test_a_schema_that_does_not_compile_is_refused(tokenizer):
    compiler = GrammarCompiler(tokenizer, [0])
    with pytest.raises(ConstraintError):
        compiler.lark("start: undefined_rule")
    mask = np.zeros(bitmask_words(len(tokenizer)), np.int32)
    compiler.json_schema({"type": "integer"}).fill_bitmask(mask)
    assert mask.any()


def test_bitmask_unpacking_matches_numpy():
    from agentrl_jax.sampling.sample import allowed_tokens

    rng = np.random.default_rng(0)
    bits = rng.integers(0, 2, (3, 70)).astype(np.uint8)
    words = np.zeros((3, bitmask_words(70) * 32), np.uint8)
    words[:, :70] = bits
    packed = np.packbits(words, axis=1, bitorder="little").view(np.int32)
    np.testing.assert_array_equal(np.asarray(allowed_tokens(jnp.asarray(packed), 70)), bits == 1)
