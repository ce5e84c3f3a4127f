"""The copy probe scores copying by content: ~0 for a perfect copier, ln V for a uniform model,
near ln V for a model that copies from a fixed distance back."""

import math

import jax
import numpy as np
import pytest
from flax import nnx

from agentrl_jax.evaluation import copy_probe
from agentrl_jax.models.config import ModelConfig
from agentrl_jax.models.decoder import Decoder

VOCAB = 4096
EPS = 1e-6   # what the hand-made predictors leave to the other tokens


def _predictor_log_probs(tokens: np.ndarray, predict) -> np.ndarray:
    """log p(token t) under a model that puts 1 − EPS on `predict(row, t)` (None: uniform)."""
    out = np.zeros(tokens.shape)
    for n, row in enumerate(tokens):
        for t in range(1, len(row)):
            guess = predict(row, t)
            if guess is None:
                out[n, t] = -math.log(VOCAB)
            else:
                out[n, t] = math.log(1 - EPS) if guess == row[t] else math.log(EPS / (VOCAB - 1))
    return out


def _induction(row, t):
    """Find the last earlier occurrence of the previous token; predict what followed it."""
    earlier = np.flatnonzero(row[:t - 1] == row[t - 1])
    return row[earlier[-1] + 1] if len(earlier) else None


@pytest.fixture(scope="module")
def batch():
    return copy_probe.probe_batch((0, VOCAB), num_sequences=32)


def test_a_perfect_copier_scores_about_zero(batch):
    nll = copy_probe.copy_nll(_predictor_log_probs(batch.tokens, _induction), batch)
    assert nll < 0.3


def test_a_uniform_model_scores_ln_v(batch):
    nll = copy_probe.copy_nll(np.full(batch.tokens.shape, -math.log(VOCAB)), batch)
    assert nll == pytest.approx(math.log(VOCAB))


def test_a_fixed_offset_shortcut_does_not_pass(batch):
    offset = int(np.median(batch.offsets))
    shortcut = _predictor_log_probs(
        batch.tokens, lambda row, t: row[t - offset] if t >= offset else None)
    # It is right only on the sequences whose repeat sits exactly `offset` back.
    assert copy_probe.copy_nll(shortcut, batch) > 0.8 * math.log(VOCAB)


def test_the_offsets_vary_and_the_repeats_are_copies(batch):
    assert len(set(batch.offsets.tolist())) > len(batch.offsets) // 2
    assert batch.offsets.min() >= 24
    for row, mask, offset in zip(batch.tokens, batch.target_mask, batch.offsets, strict=True):
        scored = np.flatnonzero(mask)
        assert len(scored) == 23
        np.testing.assert_array_equal(row[scored], row[scored - offset])


def test_held_out_and_seeded():
    a, b = copy_probe.probe_batch((5, 100)), copy_probe.probe_batch((5, 100))
    np.testing.assert_array_equal(a.tokens, b.tokens)
    assert a.tokens.min() >= 5 and a.tokens.max() < 100
    assert not np.array_equal(copy_probe.probe_batch((5, 100), seed=1).tokens, a.tokens)
    with pytest.raises(ValueError):
        copy_probe.probe_batch((0, 100), length=50, span=24)


def test_decoder_log_probs_match_the_models_own_logits():
    model = Decoder(ModelConfig.tiny(), rngs=nnx.Rngs(0))
    batch = copy_probe.probe_batch((1, 128), num_sequences=2, length=96, span=8)
    got = copy_probe.decoder_log_probs(model, batch.tokens)
    n, t = batch.tokens.shape
    positions = np.broadcast_to(np.arange(t, dtype=np.int32), (n, t))
    logits = model(batch.tokens, positions, np.ones((n, t), np.int32))
    ref = np.asarray(jax.nn.log_softmax(logits, axis=-1))
    want = np.take_along_axis(ref[:, :-1], batch.tokens[:, 1:, None], axis=-1)[..., 0]
    np.testing.assert_allclose(got[:, 1:], want, atol=1e-4)
    figures = copy_probe.run_probe(model, (1, 128), num_sequences=2, length=96, span=8)
    assert figures["copy_probe_ln_v"] == pytest.approx(math.log(128), abs=1e-3)
    assert 0 < figures["copy_probe_nll"] < 3 * math.log(128)


def test_probe_vocab_skips_leading_special_tokens():
    assert copy_probe.probe_vocab(100, {0, 1, 2, 7}) == (3, 100)
    assert copy_probe.probe_vocab(100) == (0, 100)
