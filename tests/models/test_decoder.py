"""Decoder entry points agree with each other: packing, chunked log-probs, the paged KV cache."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from agentrl_jax.models.config import ModelConfig
from agentrl_jax.models.decoder import Decoder, KVCache
from agentrl_jax.models.logprobs import chunked_logprobs, token_logprobs


def _model(family="llama", **kw):
    return Decoder(ModelConfig.tiny(family, **kw), rngs=nnx.Rngs(0))


def _tokens(n, seed=0, vocab=128):
    return jax.random.randint(jax.random.key(seed), (n,), 0, vocab, dtype=jnp.int32)


def test_packed_segments_equal_separate_sequences(family):
    model = _model(family)
    a, b = _tokens(7, 1), _tokens(5, 2)
    packed = jnp.concatenate([a, b, jnp.zeros(4, jnp.int32)])[None]
    positions = jnp.concatenate([jnp.arange(7), jnp.arange(5), jnp.zeros(4, jnp.int32)])[None]
    segments = jnp.array([[1] * 7 + [2] * 5 + [0] * 4])
    got = model(packed, positions, segments)[0]
    alone_a = model(a[None], jnp.arange(7)[None], jnp.ones((1, 7), jnp.int32))[0]
    alone_b = model(b[None], jnp.arange(5)[None], jnp.ones((1, 5), jnp.int32))[0]
    np.testing.assert_allclose(got[:7], alone_a, atol=1e-5)
    np.testing.assert_allclose(got[7:12], alone_b, atol=1e-5)


@pytest.mark.parametrize("chunk", [1, 5, 16, 64])
@pytest.mark.parametrize("temperature", [1.0, 0.8])
def test_chunked_logprobs_equal_full_log_softmax(chunk, temperature):
    model = _model()
    tokens = _tokens(16)[None].repeat(2, 0)
    positions = jnp.broadcast_to(jnp.arange(16), (2, 16))
    segments = jnp.ones((2, 16), jnp.int32)
    targets = jnp.roll(tokens, -1, axis=1)
    logp, entropy = token_logprobs(
        model, tokens, positions, segments, targets, temperature=temperature, chunk_size=chunk
    )
    full = jax.nn.log_softmax(model(tokens, positions, segments) / temperature)
    expected = jnp.take_along_axis(full, targets[..., None], -1)[..., 0]
    np.testing.assert_allclose(logp, expected, atol=1e-5)
    np.testing.assert_allclose(entropy, -(jnp.exp(full) * full).sum(-1), atol=1e-5)


def test_token_logprobs_at_positions_equal_the_full_ones_there_and_zero_elsewhere():
    model = _model()
    tokens = jnp.stack([_tokens(16, 3), _tokens(16, 4)])
    positions = jnp.broadcast_to(jnp.arange(16), (2, 16))
    segments = jnp.ones((2, 16), jnp.int32)
    targets = jnp.roll(tokens, -1, axis=1)
    at = jnp.array([[2, 9, 15, 16], [0, 16, 16, 16]])  # 16: padding
    full = token_logprobs(model, tokens, positions, segments, targets)
    some = token_logprobs(model, tokens, positions, segments, targets, at=at, chunk_size=3)
    picked = np.zeros((2, 16), bool)
    picked[0, [2, 9, 15]] = picked[1, 0] = True
    for got, want in zip(some, full, strict=True):
        np.testing.assert_allclose(np.where(picked, got, 0.0), np.where(picked, want, 0.0),
                                   atol=1e-5)
        assert not np.any(np.asarray(got)[~picked])


@pytest.mark.parametrize("keep_logits_bytes", [0, 1 << 30])
def test_chunked_logprobs_gradient_equals_full(keep_logits_bytes):
    """Recomputing each chunk's logits in the backward pass (0 bytes kept) or keeping them."""
    hidden = jax.random.normal(jax.random.key(0), (2, 10, 8))
    w = jax.random.normal(jax.random.key(1), (8, 32))
    targets = jax.random.randint(jax.random.key(2), (2, 10), 0, 32)

    def full(h, w):
        lp = jax.nn.log_softmax(h @ w)
        return jnp.take_along_axis(lp, targets[..., None], -1).sum()

    def chunked(h, w):
        return chunked_logprobs(
            h, w, targets, chunk_size=3, keep_logits_bytes=keep_logits_bytes
        )[0].sum()

    for g_full, g_chunk in zip(jax.grad(full, (0, 1))(hidden, w),
                               jax.grad(chunked, (0, 1))(hidden, w), strict=True):
        np.testing.assert_allclose(g_chunk, g_full, atol=1e-5)


def test_chunked_logprobs_kept_logits_gradients_equal_recomputed():
    """The kept-logits backward (hand-written) matches autodiff of the recomputed chunks, for
    a loss nonlinear in log p and entropy, with temperature, both layouts, both entropy modes."""
    hidden = jax.random.normal(jax.random.key(0), (2, 10, 8))
    w = jax.random.normal(jax.random.key(1), (8, 32))
    targets = jax.random.randint(jax.random.key(2), (2, 10), 0, 32)

    for vocab_major in (False, True):
        for entropy_grad in (True, False):
            def loss(h, w, keep, vocab_major=vocab_major, entropy_grad=entropy_grad):
                logp, ent = chunked_logprobs(
                    h, w, targets, chunk_size=3, temperature=0.7, vocab_major=vocab_major,
                    entropy_grad=entropy_grad, keep_logits_bytes=keep,
                )
                return jnp.sum(jnp.exp(logp) * jnp.arange(10.0)) + jnp.sum(ent**2)

            wt = w.T if vocab_major else w
            want = jax.grad(loss, (0, 1))(hidden, wt, 0)
            got = jax.grad(loss, (0, 1))(hidden, wt, 1 << 30)
            for a, b in zip(got, want, strict=True):  # |grad| up to ~7: fp32 rounding
                np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4)


def test_chunked_logprobs_vocab_major_and_entropy_grad_options():
    """A [V, D] (tied) projection gives the [D, V] results; entropy_grad=False only drops the
    entropy's gradient."""
    hidden = jax.random.normal(jax.random.key(0), (2, 10, 8))
    w = jax.random.normal(jax.random.key(1), (8, 32))
    targets = jax.random.randint(jax.random.key(2), (2, 10), 0, 32)

    def loss(h, w, **kw):
        logp, ent = chunked_logprobs(h, w, targets, chunk_size=3, **kw)
        return logp.sum() + 0.1 * ent.sum(), (logp, ent)

    (_, want), want_g = jax.value_and_grad(loss, (0, 1), has_aux=True)(hidden, w)
    (_, got), got_g = jax.value_and_grad(
        lambda h, wt: loss(h, wt, vocab_major=True), (0, 1), has_aux=True)(hidden, w.T)
    for a, b in zip(got, want, strict=True):
        np.testing.assert_allclose(a, b, atol=1e-5)
    np.testing.assert_allclose(got_g[0], want_g[0], atol=1e-5)
    np.testing.assert_allclose(got_g[1].T, want_g[1], atol=1e-5)

    (_, no_ent), no_ent_g = jax.value_and_grad(
        lambda h, w: loss(h, w, entropy_grad=False), (0, 1), has_aux=True)(hidden, w)
    logp_only = jax.grad(lambda h, w: chunked_logprobs(h, w, targets, chunk_size=3)[0].sum(),
                         (0, 1))(hidden, w)
    for a, b in zip(no_ent, want, strict=True):
        np.testing.assert_allclose(a, b, atol=1e-5)
    for a, b in zip(no_ent_g, logp_only, strict=True):
        np.testing.assert_allclose(a, b, atol=1e-5)


def test_paged_cache_prefill_then_decode_equals_full_forward(family):
    """Prefill in two chunks into scattered pages, then decode token by token."""
    model = _model(family)
    seq = _tokens(12, 3)
    full = model(seq[None], jnp.arange(12)[None], jnp.ones((1, 12), jnp.int32))[0]

    # Context slots deliberately non-contiguous, as pages of a shared pool would be.
    slots = jnp.array([9, 10, 11, 12, 3, 4, 5, 6, 20, 21, 22, 23], jnp.int32)
    cache = KVCache.zeros(model.cfg, 32)
    step = nnx.jit(lambda m, t, p, c, w, r: m.hidden_cached(t, p, c, w, r))

    outputs = []
    # Prefill 5 tokens padded to 8 (padding writes to scratch slot 0), then 3, then decode 4.
    chunks = [(0, 5, 8), (5, 8, 3), (8, 9, 1), (9, 10, 1), (10, 11, 1), (11, 12, 1)]
    for start, stop, width in chunks:
        n = stop - start
        tok = jnp.zeros(width, jnp.int32).at[:n].set(seq[start:stop])
        pos = jnp.arange(start, start + width, dtype=jnp.int32)
        write = jnp.zeros(width, jnp.int32).at[:n].set(slots[start:stop])
        h, cache = step(model, tok[None], pos[None], cache, write[None], slots[None])
        outputs.append(model.logits(h)[0, :n])
    np.testing.assert_allclose(jnp.concatenate(outputs), full, atol=1e-5)


def test_batched_decode_rows_are_independent():
    """Two sequences decoding together in one batch give what each gives alone."""
    model = _model("qwen2")
    cache = KVCache.zeros(model.cfg, 64)
    a, b = _tokens(6, 4), _tokens(3, 5)
    read = jnp.array([[1, 2, 3, 4, 5, 6], [7, 8, 9, 0, 0, 0]], jnp.int32)
    tok = jnp.stack([a, jnp.zeros(6, jnp.int32).at[:3].set(b)])
    pos = jnp.broadcast_to(jnp.arange(6), (2, 6))
    write = read.at[1, 3:].set(0)
    h, _ = model.hidden_cached(tok, pos, cache, write, read)
    alone_b = model(b[None], jnp.arange(3)[None], jnp.ones((1, 3), jnp.int32))[0]
    alone_a = model(a[None], jnp.arange(6)[None], jnp.ones((1, 6), jnp.int32))[0]
    np.testing.assert_allclose(model.logits(h)[0], alone_a, atol=1e-5)
    np.testing.assert_allclose(model.logits(h)[1, :3], alone_b, atol=1e-5)
