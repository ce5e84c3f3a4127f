"""Per-token log-probabilities of given targets without materialising [B, T, V] fp32 logits.

With a 150k vocabulary a batch of 8 × 8192 tokens would need 40 GB of fp32 logits. We project
the final hidden states chunk by chunk along the sequence (`lax.scan`), keep only the target's
log-probability and the entropy of each position, and recompute each chunk's logits in the
backward pass (`jax.checkpoint`), so peak memory holds one [B · chunk, V] block.

When all chunks' fp32 logits fit in `keep_logits_bytes` (1 GiB by default: 5k tokens of a 49k
vocabulary), they are kept for the backward pass instead, which then skips the recomputation,
a quarter of the LM head's matmul work (SmolLM2-135M, 2048 tokens: 0.12 of 1.87 TFLOP a step).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

from agentrl_jax.models.decoder import Decoder
from agentrl_jax.models.matmul import sum_of_outer_products

# Default budget of `chunked_logprobs` for keeping the logits of all chunks (fp32 bytes).
KEEP_LOGITS_BYTES = 1 << 30


def _chunk_stats(h, w, tgt, temperature, vocab_major):
    """One chunk's scaled logits z = h·W / temperature [rows, V], logsumexp, log p(target),
    entropy and E_p[z]."""
    spec = "rd,vd->rv" if vocab_major else "rd,dv->rv"
    z = jnp.einsum(spec, h, w, preferred_element_type=jnp.float32) / temperature
    lse = jax.nn.logsumexp(z, axis=-1)
    target_z = jnp.take_along_axis(z, tgt[..., None], axis=-1)[..., 0]
    probs = jnp.exp(z - lse[..., None])
    mean_z = jnp.sum(probs * z, axis=-1)
    return z, lse, target_z - lse, lse - mean_z, mean_z


@functools.partial(jax.custom_vjp, nondiff_argnums=(3, 4, 5))
def _kept_logits_logprobs(h_chunks, w, t_chunks, temperature, vocab_major, entropy_grad):
    """(log p, entropy) [n, rows] of chunks [n, rows, D]; the backward pass reads the logits
    that the forward kept instead of projecting again."""
    return _kept_fwd(h_chunks, w, t_chunks, temperature, vocab_major, entropy_grad)[0]


def _kept_fwd(h_chunks, w, t_chunks, temperature, vocab_major, entropy_grad):
    def body(_, xs):
        h, tgt = xs
        z, lse, logp, entropy, mean_z = _chunk_stats(h, w, tgt, temperature, vocab_major)
        return None, (logp, entropy, z, lse, mean_z)

    _, (logp, entropy, z, lse, mean_z) = jax.lax.scan(body, None, (h_chunks, t_chunks))
    return (logp, entropy), (h_chunks, w, t_chunks, z, lse, mean_z)


def _kept_bwd(temperature, vocab_major, entropy_grad, res, cotangents):
    h_chunks, w, t_chunks, z, lse, mean_z = res
    g_logp, g_entropy = cotangents

    def body(dw, xs):
        h, tgt, z, lse, mean_z, g_logp, g_entropy = xs
        probs = jnp.exp(z - lse[:, None])
        # d log p(target) / dz = onehot(target) - p;  d entropy / dz = p (E_p[z] - z).
        hit = jnp.arange(z.shape[-1])[None, :] == tgt[:, None]
        dz = jnp.where(hit, g_logp[:, None], 0.0) - g_logp[:, None] * probs
        if entropy_grad:
            dz = dz + g_entropy[:, None] * probs * (mean_z[:, None] - z)
        dz = (dz / temperature).astype(h.dtype)
        if vocab_major:
            dh = jnp.einsum("rv,vd->rd", dz, w, preferred_element_type=jnp.float32)
            dw = dw + sum_of_outer_products(dz, h)
        else:
            dh = jnp.einsum("rv,dv->rd", dz, w, preferred_element_type=jnp.float32)
            dw = dw + sum_of_outer_products(h, dz)
        return dw, dh.astype(h.dtype)

    xs = (h_chunks, t_chunks, z, lse, mean_z, g_logp, g_entropy)
    dw, dh = jax.lax.scan(body, jnp.zeros(w.shape, jnp.float32), xs)
    return dh, dw.astype(w.dtype), None


_kept_logits_logprobs.defvjp(_kept_fwd, _kept_bwd)


def chunked_logprobs(
    hidden: jax.Array,
    out_embedding: jax.Array,
    targets: jax.Array,
    *,
    temperature: float = 1.0,
    chunk_size: int = 256,
    vocab_major: bool = False,
    entropy_grad: bool = True,
    keep_logits_bytes: int = KEEP_LOGITS_BYTES,
) -> tuple[jax.Array, jax.Array]:
    """log p(target) and entropy of softmax(h·W / temperature), position by position.

    Args:
      hidden: [B, T, D] final hidden states.
      out_embedding: [D, V] output projection, or [V, D] (a tied input embedding) when
        `vocab_major`.
      targets: int32 [B, T] token whose log-probability to return at each position.
      temperature: logits are divided by it, as the sampler does.
      chunk_size: positions of each sequence projected at once (B · chunk_size rows).
      vocab_major: `out_embedding` is [V, D]. The projection then contracts it in place: a
        transpose outside the chunk loop would be materialised (and its gradient transposed
        back) every step.
      entropy_grad: differentiate the entropy too; without, it is a metric only, and the
        backward pass skips its share of the [rows, V] elementwise work.
      keep_logits_bytes: keep all chunks' fp32 logits for the backward pass when they fit in
        this many bytes; otherwise each chunk's are recomputed there (0: always recompute).
    Returns:
      (logprobs, entropy), both fp32 [B, T].
    """
    b, t, d = hidden.shape
    # Chunks of whole rows of the flattened [B·T, D] hidden states: each chunk's projection and
    # its gradients are then plain 2-D matmuls (a [B, chunk, D] operand would make the weight
    # gradient contract over two axes, which XLA CPU lowers via a transposed copy).
    rows = b * min(chunk_size, t)
    total = b * t
    pad = (-total) % rows
    flat_h = hidden.reshape(total, d)
    flat_t = targets.reshape(total)
    if pad:
        flat_h = jnp.pad(flat_h, ((0, pad), (0, 0)))
        flat_t = jnp.pad(flat_t, (0, pad))
    n = (total + pad) // rows
    h_chunks = flat_h.reshape(n, rows, d)
    t_chunks = flat_t.reshape(n, rows)
    w = out_embedding.astype(hidden.dtype)
    vocab = w.shape[0] if vocab_major else w.shape[1]
    if n * rows * vocab * 4 <= keep_logits_bytes:
        # Its backward ignores the entropy's cotangent unless entropy_grad.
        logp, entropy = _kept_logits_logprobs(
            h_chunks, w, t_chunks, temperature, vocab_major, entropy_grad
        )
    else:

        @jax.checkpoint
        def one_chunk(h, tgt):
            _, _, logp, entropy, _ = _chunk_stats(h, w, tgt, temperature, vocab_major)
            if not entropy_grad:
                entropy = jax.lax.stop_gradient(entropy)
            return logp, entropy

        def body(_, xs):
            return None, one_chunk(*xs)

        _, (logp, entropy) = jax.lax.scan(body, None, (h_chunks, t_chunks))
    logp = logp.reshape(n * rows)[:total].reshape(b, t)
    entropy = entropy.reshape(n * rows)[:total].reshape(b, t)
    return logp, entropy


def token_logprobs(
    model: Decoder,
    tokens: jax.Array,
    positions: jax.Array,
    segment_ids: jax.Array,
    targets: jax.Array,
    *,
    temperature: float = 1.0,
    chunk_size: int = 256,
    remat: bool = False,
    entropy_grad: bool = True,
    keep_logits_bytes: int = KEEP_LOGITS_BYTES,
    at: jax.Array | None = None,
) -> tuple[jax.Array, jax.Array]:
    """The training forward: (log p(targets), entropy), fp32 [B, T], for a Decoder.

    `targets[b, t]` is usually `tokens[b, t + 1]`; positions without a meaningful target are
    the caller's to mask. `entropy_grad=False` when the entropy is only reported.

    `at` (int32 [B, K], `rl.batch.loss_positions`) projects only those positions of each row
    onto the vocabulary; entries equal to T are padding. Elsewhere both outputs are 0. A
    warm-start or policy loss reads only the agent's tokens, often a tenth of a row.
    """
    hidden = model.hidden(tokens, positions, segment_ids, remat=remat)
    tied = model.cfg.tie_word_embeddings
    if at is not None:
        hidden, targets = gather_positions(hidden, at), gather_positions(targets, at)
    logp, entropy = chunked_logprobs(
        hidden, model.embed[...] if tied else model.output_embedding(), targets,
        temperature=temperature, chunk_size=chunk_size, vocab_major=tied,
        entropy_grad=entropy_grad, keep_logits_bytes=keep_logits_bytes,
    )
    if at is None:
        return logp, entropy
    length = tokens.shape[1]
    return scatter_positions(logp, at, length), scatter_positions(entropy, at, length)


def gather_positions(x: jax.Array, at: jax.Array) -> jax.Array:
    """x[b, at[b, k]] for x [B, T, ...] and at [B, K]: [B, K, ...]; padding (T) reads x[b, T−1]."""
    index = jnp.minimum(at, x.shape[1] - 1)
    index = index.reshape(index.shape + (1,) * (x.ndim - 2))
    return jnp.take_along_axis(x, index, axis=1)


def scatter_positions(values: jax.Array, at: jax.Array, length: int) -> jax.Array:
    """[B, T] zeros with values[b, k] at position at[b, k]; padding entries (T) are dropped."""
    rows = jnp.arange(values.shape[0])[:, None]
    out = jnp.zeros((values.shape[0], length + 1), values.dtype)
    return out.at[rows, at].set(values)[:, :length]
