"""Mimetic attention: each head's query-key product leans to +I, value-output to −I."""

import numpy as np
import pytest
from flax import nnx

from agentrl_jax.models.config import ModelConfig
from agentrl_jax.models.decoder import Decoder
from agentrl_jax.models.mimetic import head_products, low_rank_factors, mimetic_attention


def test_low_rank_factors_are_the_best_approximation():
    m = np.random.default_rng(0).normal(size=(8, 8))
    a, b = low_rank_factors(m, 8)
    np.testing.assert_allclose(a @ b, m, atol=1e-10)
    a, b = low_rank_factors(m, 3)
    s = np.linalg.svd(m, compute_uv=False)
    assert np.linalg.norm(m - a @ b, 2) == pytest.approx(s[3])


def _identity_share(m: np.ndarray) -> float:
    """Projection of m onto I, relative to its norm: 1 for c·I, ~0 for a random matrix."""
    return float(np.trace(m) / (np.sqrt(len(m)) * np.linalg.norm(m)))


@pytest.mark.parametrize("family", ["llama", "qwen2"])
def test_products_lean_to_plus_and_minus_identity(family):
    model = Decoder(ModelConfig.tiny(family, num_heads=4, num_kv_heads=2), rngs=nnx.Rngs(0))
    before = [_identity_share(np.asarray(p)) for p in head_products(model, 0, 0)]
    mimetic_attention(model, seed=1)
    group = model.cfg.num_heads // model.cfg.num_kv_heads
    for layer in range(model.cfg.num_layers):
        for head in range(model.cfg.num_heads):
            qk, vo = (np.asarray(p) for p in head_products(model, layer, head))
            # rank head_dim of d: the identity's best share is sqrt(head_dim / d)
            ceiling = np.sqrt(model.cfg.head_dim / model.cfg.hidden_size)
            assert _identity_share(qk) > 0.7 * ceiling
            assert _identity_share(vo) < -0.7 * ceiling
            assert np.all(np.isfinite(qk)) and np.all(np.isfinite(vo))
        # the heads of a group share keys and values
        _, vo0 = head_products(model, layer, 0)
        _, vo1 = head_products(model, layer, group - 1)
        np.testing.assert_allclose(np.asarray(vo0), np.asarray(vo1))
    assert all(abs(share) < 0.3 for share in before)
    # the model still runs
    tokens = np.arange(8, dtype=np.int32)[None]
    logits = model(tokens, tokens, np.ones_like(tokens))
    assert np.all(np.isfinite(np.asarray(logits)))
