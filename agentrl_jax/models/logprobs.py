"""Per-token log-probabilities of given targets without materialising [B, T, V] fp32 logits.

With a 150k vocabulary a batch of 8 × 8192 tokens would need 40 GB of fp32 logits. We project
the final hidden states chunk by chunk along the sequence (`lax.scan`), keep only the target's
log-probability and the entropy of each position, and recompute each chunk's logits in the
backward pass (`jax.checkpoint`), so peak memory holds one [B · chunk, V] block.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from agentrl_jax.models.decoder import Decoder


def chunked_logprobs(
    hidden: jax.Array,
    out_embedding: jax.Array,
    targets: jax.Array,
    *,
    temperature: float = 1.0,
    chunk_size: int = 256,
    vocab_major: bool = False,
    entropy_grad: bool = True,
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
    spec = "rd,vd->rv" if vocab_major else "rd,dv->rv"

    @jax.checkpoint
    def one_chunk(h, tgt):
        logits = jnp.einsum(spec, h, w, preferred_element_type=jnp.float32)
        logits = logits / temperature
        lse = jax.nn.logsumexp(logits, axis=-1)
        target_logit = jnp.take_along_axis(logits, tgt[..., None], axis=-1)[..., 0]
        probs = jnp.exp(logits - lse[..., None])
        entropy = lse - jnp.sum(probs * logits, axis=-1)
        if not entropy_grad:
            entropy = jax.lax.stop_gradient(entropy)
        return target_logit - lse, entropy

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
) -> tuple[jax.Array, jax.Array]:
    """The training forward: (log p(targets), entropy), fp32 [B, T], for a Decoder.

    `targets[b, t]` is usually `tokens[b, t + 1]`; positions without a meaningful target are
    the caller's to mask. `entropy_grad=False` when the entropy is only reported.
    """
    hidden = model.hidden(tokens, positions, segment_ids, remat=remat)
    tied = model.cfg.tie_word_embeddings
    return chunked_logprobs(
        hidden, model.embed[...] if tied else model.output_embedding(), targets,
        temperature=temperature, chunk_size=chunk_size, vocab_major=tied,
        entropy_grad=entropy_grad,
    )
