"""The training attention (block-causal, skipping key blocks past the diagonal) equals the
full masked attention, values and gradients, for packed and padded rows."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from agentrl_jax.models import layers as L


def _packed_rows(length: int) -> tuple[jax.Array, jax.Array]:
    """Row 0: two packed segments then padding; row 1: left padding then one segment."""
    a, b = length // 2, length // 3
    pad0 = length - a - b
    seg0 = [1] * a + [2] * b + [0] * pad0
    pos0 = list(range(a)) + list(range(b)) + [0] * pad0
    pad1 = length // 4
    seg1 = [0] * pad1 + [1] * (length - pad1)
    pos1 = [0] * pad1 + list(range(length - pad1))
    return jnp.array([seg0, seg1], jnp.int32), jnp.array([pos0, pos1], jnp.int32)


@pytest.mark.parametrize("length,block", [(16, 4), (19, 4), (8, 16), (24, 8)])
def test_block_causal_attention_equals_full_masked_attention(length, block):
    keys = jax.random.split(jax.random.key(0), 4)
    q = jax.random.normal(keys[0], (2, length, 6, 8))
    k = jax.random.normal(keys[1], (2, length, 2, 8))
    v = jax.random.normal(keys[2], (2, length, 2, 8))
    cotangent = jax.random.normal(keys[3], (2, length, 6, 8))
    segments, positions = _packed_rows(length)

    def full(q, k, v):
        out = L.attention(q, k, v, L.segment_causal_mask(segments, positions))
        return jnp.sum(out * cotangent), out

    def blocked(q, k, v):
        masks = L.segment_causal_block_masks(segments, positions, block)
        out = L.block_causal_attention(q, k, v, masks)
        return jnp.sum(out * cotangent), out

    (_, want), want_grads = jax.value_and_grad(full, (0, 1, 2), has_aux=True)(q, k, v)
    (_, got), got_grads = jax.value_and_grad(blocked, (0, 1, 2), has_aux=True)(q, k, v)
    np.testing.assert_allclose(got, want, atol=1e-5)
    assert not np.any(np.asarray(got)[0, length // 2 + length // 3:])  # padding rows
    for g, w in zip(got_grads, want_grads, strict=True):
        np.testing.assert_allclose(g, w, atol=1e-5)


def test_query_blocks_cover_the_sequence():
    assert L.query_blocks(10, 4) == [(0, 4), (4, 8), (8, 10)]
    assert L.query_blocks(3, 8) == [(0, 3)]
