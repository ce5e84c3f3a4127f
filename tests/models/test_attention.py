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


def test_bfloat16_gradients_follow_the_float32_reference():
    keys = jax.random.split(jax.random.key(1), 4)
    length = 24
    q, k, v = (jax.random.normal(keys[i], (2, length, h, 8)) for i, h in enumerate((6, 2, 2)))
    cotangent = jax.random.normal(keys[3], (2, length, 6, 8))
    segments, positions = _packed_rows(length)
    masks = L.segment_causal_block_masks(segments, positions, 8)

    def loss(q, k, v):
        out = L.block_causal_attention(q, k, v, masks)
        assert out.dtype == q.dtype
        return jnp.sum(out.astype(jnp.float32) * cotangent)

    want = jax.grad(loss, (0, 1, 2))(q, k, v)
    got = jax.grad(loss, (0, 1, 2))(*(x.astype(jnp.bfloat16) for x in (q, k, v)))
    for g, w in zip(got, want, strict=True):
        assert g.dtype == jnp.bfloat16
        np.testing.assert_allclose(np.asarray(g, np.float32), w, atol=0.1, rtol=0.05)


def test_the_training_checkpoint_keeps_the_attention_residuals_not_its_probabilities(capsys):
    """The backward pass rebuilds the probabilities from the kept log-sum-exp; it needs neither
    [T, S] scores kept nor the softmax recomputed."""
    from agentrl_jax.models.decoder import checkpoint_policy

    length, block = 16, 4
    keys = jax.random.split(jax.random.key(2), 3)
    q = jax.random.normal(keys[0], (2, length, 6, 8))
    k, v = (jax.random.normal(key, (2, length, 2, 8)) for key in keys[1:])
    segments, positions = _packed_rows(length)
    masks = L.segment_causal_block_masks(segments, positions, block)

    def loss(q, k, v):
        return jnp.sum(L.block_causal_attention(q, k, v, masks) ** 2)

    capsys.readouterr()
    jax.ad_checkpoint.print_saved_residuals(
        jax.checkpoint(loss, policy=checkpoint_policy(remat=False)), q, k, v)
    saved = capsys.readouterr().out.splitlines()   # "f32[2,2,3,16] named 'attention_lse' ..."
    named = {line.split("'")[1]: line.split()[0] for line in saved if " named '" in line}
    assert named == {"attention_out": f"f32[2,2,3,{length},8]",
                     "attention_lse": f"f32[2,2,3,{length}]"}
    assert not any(line.startswith("f32") and " named '" not in line
                   and "from the argument" not in line for line in saved), saved  # no scores
    # And with the policy the gradient is the same.
    plain = jax.grad(loss, (0, 1, 2))(q, k, v)
    kept = jax.grad(jax.checkpoint(loss, policy=checkpoint_policy(remat=False)), (0, 1, 2))(
        q, k, v)
    for a, b in zip(plain, kept, strict=True):
        np.testing.assert_allclose(a, b, atol=1e-6)
