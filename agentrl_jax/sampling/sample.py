"""Drawing the next token on device, row by row with per-row sampling parameters.

Every parameter is an array with one entry per row, so one compiled function serves any mix of
greedy and sampled requests. Truncation (top-k, top-p) needs a sort of the vocabulary; rows that
use neither skip it at run time (`lax.cond`), which keeps plain temperature sampling cheap.
Sampling itself is inverse-CDF with one uniform per row rather than Gumbel-max, which would need
a random number for every vocabulary entry.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp


def row_keys(seeds: jax.Array, positions: jax.Array) -> jax.Array:
    """A key per row: fold_in(key(seed), position of the token being drawn)."""
    return jax.vmap(lambda s, p: jax.random.fold_in(jax.random.key(s), p))(seeds, positions)


def _truncate(scaled: jax.Array, top_k: jax.Array, top_p: jax.Array) -> jax.Array:
    """Sets logits outside each row's top-k, then outside its top-p nucleus, to -inf."""
    vocab = scaled.shape[-1]
    descending = -jnp.sort(-scaled, axis=-1)
    k = jnp.where(top_k > 0, jnp.minimum(top_k, vocab), vocab)
    kth = jnp.take_along_axis(descending, (k - 1)[:, None], axis=-1)
    ranks = jnp.arange(vocab)[None, :]
    # top-p on the top-k-renormalised distribution: keep the smallest prefix reaching mass p.
    in_top_k = jnp.where(ranks < k[:, None], descending, -jnp.inf)
    sorted_probs = jax.nn.softmax(in_top_k, axis=-1)
    # A token is kept while the mass before it is below p; the most likely one always is.
    preceding = jnp.cumsum(sorted_probs, axis=-1) - sorted_probs
    keep = jnp.sum(preceding < top_p[:, None], axis=-1)
    keep = jnp.clip(keep, 1, k)
    pth = jnp.take_along_axis(descending, (keep - 1)[:, None], axis=-1)
    threshold = jnp.maximum(kth, pth)
    return jnp.where(scaled >= threshold, scaled, -jnp.inf)


def allowed_tokens(bitmask: jax.Array, vocab_size: int) -> jax.Array:
    """bool [B, V] from an int32 bitmask [B, ceil(V / 32)]: token t is allowed when bit
    t % 32 of word t // 32 is set (`constraint.TokenConstraint`)."""
    bits = jnp.right_shift(bitmask.astype(jnp.uint32)[:, :, None],
                           jnp.arange(32, dtype=jnp.uint32)) & 1
    return bits.reshape(bitmask.shape[0], -1)[:, :vocab_size].astype(bool)


def sample_tokens(
    logits: jax.Array,
    temperature: jax.Array,
    top_k: jax.Array,
    top_p: jax.Array,
    keys: jax.Array,
    bitmask: jax.Array | None = None,
) -> tuple[jax.Array, jax.Array]:
    """Draws one token per row.

    Args:
      logits: fp32 [B, V].
      temperature: fp32 [B]; 0 means greedy.
      top_k: int32 [B]; 0 disables.
      top_p: fp32 [B]; 1 disables.
      keys: [B] PRNG keys.
      bitmask: int32 [B, ceil(V / 32)], the tokens each row may draw (`allowed_tokens`), or
        None: all. A row's logits outside it are -inf before anything else.
    Returns:
      tokens int32 [B] and their log-probabilities fp32 [B] under softmax(logits / T) (over
      the allowed tokens) before truncation (T = 1 for greedy rows).
    """
    logits = logits.astype(jnp.float32)
    if bitmask is not None:
        logits = jnp.where(allowed_tokens(bitmask, logits.shape[-1]), logits, -jnp.inf)
    greedy = temperature <= 0
    scaled = logits / jnp.where(greedy, 1.0, temperature)[:, None]
    # log p = logit − logsumexp, as the trainer's `chunked_logprobs` computes it (max-shifted).
    top = jnp.max(scaled, axis=-1)
    log_normaliser = top + jnp.log(jnp.sum(jnp.exp(scaled - top[:, None]), axis=-1))
    # Greedy rows take the first index of the maximum (argmax's choice), found with plain
    # reductions that vectorise; XLA's CPU argmax is a slow (value, index) pair reduction.
    vocab = jnp.arange(scaled.shape[-1], dtype=jnp.int32)
    argmax = jnp.min(jnp.where(scaled == top[:, None], vocab, scaled.shape[-1]), axis=-1)

    def draw(scaled):
        truncating = jnp.any(~greedy & ((top_k > 0) | (top_p < 1)))
        candidates = jax.lax.cond(
            truncating, lambda s: _truncate(s, top_k, top_p), lambda s: s, scaled
        )
        cdf = jnp.cumsum(jax.nn.softmax(candidates, axis=-1), axis=-1)
        u = jax.vmap(lambda k: jax.random.uniform(k, (), jnp.float32))(keys)
        # First index whose cumulative mass exceeds u·total: zero-probability tokens are never
        # hit.
        drawn = jnp.sum(cdf < (u * cdf[:, -1])[:, None], axis=-1)
        return jnp.minimum(drawn, logits.shape[-1] - 1).astype(jnp.int32)

    # An all-greedy batch (e.g. evaluation) skips the softmax and cumulative sum entirely.
    drawn = jax.lax.cond(
        jnp.all(greedy), lambda s: jnp.zeros(s.shape[0], jnp.int32), draw, scaled
    )
    tokens = jnp.where(greedy, jnp.minimum(argmax, scaled.shape[-1] - 1), drawn).astype(jnp.int32)
    logprobs = jnp.take_along_axis(scaled, tokens[:, None], axis=-1)[:, 0] - log_normaliser
    return tokens, logprobs
