"""Tiny models and a from-scratch greedy reference for the sampling engine tests."""

import functools

import jax
import numpy as np
import pytest
from flax import nnx

from agentrl_jax.models.config import ModelConfig
from agentrl_jax.models.decoder import Decoder
from agentrl_jax.sampling import EngineConfig, SamplingEngine

# Small pages and buckets, so prompts of a few dozen tokens cross pages, chunks and buckets.
TINY_ENGINE = EngineConfig(
    max_batch=4, page_size=4, num_pages=64, max_context=64, prefill_buckets=(8, 16),
    context_buckets=(16,), batch_buckets=(1, 2), steps_per_sync=3,
)


def tiny_model(family: str = "llama", seed: int = 0, **overrides) -> Decoder:
    """A tiny decoder whose weights are large enough that greedy argmaxes are far from ties."""
    model = Decoder(ModelConfig.tiny(family, **overrides), rngs=nnx.Rngs(seed))
    state = nnx.state(model, nnx.Param)
    scaled = jax.tree.map(lambda x: x * 8.0 if x.ndim >= 2 else x, state)
    nnx.update(model, scaled)
    return model


def make_engine(model: Decoder, **config) -> SamplingEngine:
    import dataclasses

    return SamplingEngine(model, dataclasses.replace(TINY_ENGINE, **config))


_REFERENCE_LEN = 96  # sequences are padded to this, so the reference compiles once per model


@functools.lru_cache(maxsize=8)
def _reference_forward(model: Decoder):
    return jax.jit(lambda t, p, s: model(t, p, s))


def reference_logits(model: Decoder, tokens) -> np.ndarray:
    """The training forward's logits [len(tokens), V] of a whole sequence."""
    length = len(tokens)
    assert length <= _REFERENCE_LEN
    t = np.zeros((1, _REFERENCE_LEN), np.int32)
    t[0, :length] = tokens
    segments = (np.arange(_REFERENCE_LEN) < length).astype(np.int32)[None]
    positions = np.arange(_REFERENCE_LEN, dtype=np.int32)[None]
    return np.asarray(_reference_forward(model)(t, positions, segments)[0, :length])


def reference_greedy(model: Decoder, prompt, n: int) -> list[int]:
    """Greedy continuation by the training forward, recomputing the whole sequence each token."""
    tokens = list(prompt)
    for _ in range(n):
        tokens.append(int(np.argmax(reference_logits(model, tokens)[-1])))
    return tokens[len(prompt):]


def random_prompt(n: int, seed: int, vocab: int = 128) -> list[int]:
    return np.random.default_rng(seed).integers(0, vocab, n).tolist()


@pytest.fixture
def llama():
    return tiny_model("llama")
