"""Pure functions of the decoder: RMSNorm, rotary embeddings, grouped-query attention.

They take arrays and return arrays; the `Decoder` module owns the parameters and wires these
together. Shapes: B batch, T query tokens, S key tokens, K kv heads, G query heads per kv head,
D head dim.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
from jax.ad_checkpoint import checkpoint_name

from agentrl_jax.models.config import ModelConfig
from agentrl_jax.models.matmul import linear


def rms_norm(x: jax.Array, weight: jax.Array, eps: float) -> jax.Array:
    """y = w · x / sqrt(mean(x²) + eps), computed in fp32 and cast back (as HF does)."""
    x32 = x.astype(jnp.float32)
    y = x32 * jax.lax.rsqrt(jnp.mean(x32 * x32, axis=-1, keepdims=True) + eps)
    return weight.astype(x.dtype) * y.astype(x.dtype)


def lora_linear(h: jax.Array, w: jax.Array, a: jax.Array, b: jax.Array, scale: float
                ) -> jax.Array:
    """y = h W + scale · (h A) B: a projection with a low-rank adapter, applied unmerged.

    h [N, in], W [in, out], A [in, r], B [r, out]. The adapter path costs two rank-r matmuls
    instead of a full [in, out] update, and W gets no gradient when it is not differentiated.
    """
    return linear(h, w) + linear(linear(h, a) * scale, b)


def rope_inv_freq(cfg: ModelConfig) -> np.ndarray:
    """Inverse frequencies θ^(-2i/d) of the rotated dims, with Llama-3 scaling when configured."""
    dim = cfg.rotary_dim
    inv_freq = 1.0 / (cfg.rope_theta ** (np.arange(0, dim, 2, dtype=np.float64) / dim))
    if cfg.rope_scaling:
        s = dict(cfg.rope_scaling)
        factor, low, high = s["factor"], s["low_freq_factor"], s["high_freq_factor"]
        old_len = s["original_max_position_embeddings"]
        wavelen = 2 * math.pi / inv_freq
        smooth = (old_len / wavelen - low) / (high - low)
        scaled = np.where(wavelen > old_len / low, inv_freq / factor, inv_freq)
        mid = (wavelen <= old_len / low) & (wavelen >= old_len / high)
        inv_freq = np.where(mid, (1 - smooth) * scaled / factor + smooth * scaled, scaled)
    return inv_freq.astype(np.float32)


def rope_tables(positions: jax.Array, cfg: ModelConfig) -> tuple[jax.Array, jax.Array]:
    """(cos, sin) of the rotary angles at `positions` [B, T]: fp32 [B, T, 1, rotary_dim / 2].

    A stack of layers can compute them once and hand them to every layer's `apply_rope`:
    computed inside a layer, XLA fuses the cos/sin into the rotation and evaluates them per
    element of [B, T, heads, dim], in every layer and again in the backward pass.
    """
    angles = positions.astype(jnp.float32)[..., None] * jnp.asarray(rope_inv_freq(cfg))
    return jnp.cos(angles)[:, :, None, :], jnp.sin(angles)[:, :, None, :]


def apply_rope(x: jax.Array, tables: tuple[jax.Array, jax.Array], cfg: ModelConfig) -> jax.Array:
    """Rotates the first `rotary_dim` dims of each head of x [B, T, H, D] by position.

    `tables` are `rope_tables(positions, cfg)`. Llama/Qwen2 rotate the two halves
    (x_i, x_{i+d/2}) together; GLM-4 rotates adjacent pairs (x_{2i}, x_{2i+1}) and leaves the
    dims past `rotary_dim` untouched.
    """
    dim = cfg.rotary_dim
    cos, sin = tables
    rot, passthrough = x[..., :dim].astype(jnp.float32), x[..., dim:]
    if cfg.interleaved_rotary:
        even, odd = rot[..., 0::2], rot[..., 1::2]
        out = jnp.stack([even * cos - odd * sin, odd * cos + even * sin], axis=-1)
        out = out.reshape(rot.shape)
    else:
        first, second = rot[..., : dim // 2], rot[..., dim // 2 :]
        out = jnp.concatenate([first * cos - second * sin, second * cos + first * sin], axis=-1)
    return jnp.concatenate([out.astype(x.dtype), passthrough], axis=-1)


def attention(q: jax.Array, k: jax.Array, v: jax.Array, mask: jax.Array) -> jax.Array:
    """softmax(q·kᵀ/√D + mask) · v with grouped kv heads.

    Args:
      q: [B, T, K·G, D] queries.
      k, v: [B, S, K, D] keys and values.
      mask: [B, T, S] bool, True where query t may attend to key s.
    Returns:
      [B, T, K·G, D] in q's dtype. Rows with no allowed key (padding) come out as zeros.
    """
    b, t, heads, d = q.shape
    kv_heads = k.shape[2]
    q = q.reshape(b, t, kv_heads, heads // kv_heads, d)
    scores = jnp.einsum("btkgd,bskd->bkgts", q, k, preferred_element_type=jnp.float32)
    scores = scores / math.sqrt(d)
    scores = jnp.where(mask[:, None, None], scores, -jnp.inf)
    # Fully masked rows (padding queries) would give NaN; make them attend to nothing instead.
    any_key = jnp.any(mask, axis=-1)[:, None, None, :, None]
    probs = jax.nn.softmax(jnp.where(any_key, scores, 0.0), axis=-1)
    probs = jnp.where(any_key, probs, 0.0).astype(v.dtype)
    out = jnp.einsum("bkgts,bskd->btkgd", probs, v)
    return out.reshape(b, t, heads, d)


# Score of a masked key: finite, so a row with no allowed key (padding) stays NaN-free, and far
# enough below any real score that exp() of it is exactly 0 next to one.
_MASKED = -0.7 * float(np.finfo(np.float32).max)


def query_blocks(length: int, block: int) -> list[tuple[int, int]]:
    """[lo, hi) bounds of consecutive query blocks of at most `block` tokens covering `length`."""
    return [(lo, min(lo + block, length)) for lo in range(0, length, block)]


def segment_causal_block_masks(
    segment_ids: jax.Array, positions: jax.Array, block: int
) -> list[jax.Array]:
    """Masks of `block_causal_attention`: for query block [lo, hi), [B, hi - lo, hi] bool.

    Query t may attend to key s < hi when both are in the same nonzero segment and key position
    ≤ query position (`segment_causal_mask` restricted to keys up to the block's end).
    """
    masks = []
    for lo, hi in query_blocks(segment_ids.shape[1], block):
        seg_q, seg_k = segment_ids[:, lo:hi, None], segment_ids[:, None, :hi]
        causal = positions[:, None, :hi] <= positions[:, lo:hi, None]
        masks.append((seg_q == seg_k) & (seg_q != 0) & causal)
    return masks


def block_causal_attention(
    q: jax.Array, k: jax.Array, v: jax.Array, masks: list[jax.Array]
) -> jax.Array:
    """Self-attention (as `attention`) that skips the key blocks after each query block.

    Query block [lo, hi) only scores keys [0, hi): the keys after it are masked anyway when a
    segment's tokens appear in position order (the packing and padding conventions), so about
    half of the T × T scores, their softmax and their gradients are never computed. The
    gradient is FlashAttention's (`_block_attention_bwd`): it keeps each row's log-sum-exp and
    the output, not the probabilities.

    Args:
      q: [B, T, K·G, D] queries; k, v: [B, T, K, D] keys and values of the same tokens.
      masks: `segment_causal_block_masks(segment_ids, positions, block)`.
    Returns:
      [B, T, K·G, D] in q's dtype; rows with no allowed key (padding) come out as zeros.
    """
    b, t, heads, d = q.shape
    kv_heads = k.shape[2]
    # Head-major layouts, so every block's two matmuls are plain batched matmuls over (B, K).
    q = (q * (1.0 / math.sqrt(d))).reshape(b, t, kv_heads, heads // kv_heads, d)
    q = q.transpose(0, 2, 3, 1, 4)  # [B, K, G, T, D]
    k, v = k.transpose(0, 2, 1, 3), v.transpose(0, 2, 1, 3)  # [B, K, S, D]
    out = _block_attention(q, k, v, tuple(masks))
    return out.transpose(0, 3, 1, 2, 4).reshape(b, t, heads, d)


def _block_scores(q, k, mask, lo: int, hi: int) -> jax.Array:
    """Masked fp32 scores [B, K, G, hi - lo, hi] of query block [lo, hi) over keys [0, hi)."""
    scores = jnp.einsum("bkgtd,bksd->bkgts", q[:, :, :, lo:hi], k[:, :, :hi],
                        preferred_element_type=jnp.float32)
    return jnp.where(mask[:, None, None], scores, _MASKED)


# Names of the forward's residuals that the backward needs (`jax.checkpoint` policies can keep
# them): the output [B, K, G, T, D] and the rows' log-sum-exp [B, K, G, T].
ATTENTION_RESIDUALS = ("attention_out", "attention_lse")


@jax.custom_vjp
def _block_attention(q, k, v, masks):
    """Head-major block-causal attention: q [B, K, G, T, D] (already scaled), k, v [B, K, S, D]."""
    return _block_attention_fwd(q, k, v, masks)[0]


def _block_attention_fwd(q, k, v, masks):
    """out_t = Σ_s exp(s_ts - m_t) v_s / l_t with m_t = max_s s_ts, l_t = Σ_s exp(s_ts - m_t);
    also returns lse_t = m_t + log l_t for the backward pass."""
    block = masks[0].shape[1]
    outs, lses = [], []
    for (lo, hi), mask in zip(query_blocks(q.shape[3], block), masks, strict=True):
        scores = _block_scores(q, k, mask, lo, hi)
        top = jnp.max(scores, axis=-1, keepdims=True)
        weights = jnp.exp(scores - top)
        total = jnp.sum(weights, axis=-1, keepdims=True)
        # Normalise the [.., D] output rather than the [.., S] weights: one pass fewer.
        out = jnp.einsum("bkgts,bksd->bkgtd", weights.astype(v.dtype), v[:, :, :hi],
                         preferred_element_type=jnp.float32) / total
        # A row with no allowed key came out as the mean of the masked values; zero it.
        any_key = jnp.any(mask, axis=-1)[:, None, None, :, None]
        outs.append(jnp.where(any_key, out, 0.0).astype(q.dtype))
        lses.append((top + jnp.log(total))[..., 0])
    out = jnp.concatenate(outs, axis=3) if len(outs) > 1 else outs[0]
    lse = jnp.concatenate(lses, axis=3) if len(lses) > 1 else lses[0]
    out = checkpoint_name(out, ATTENTION_RESIDUALS[0])
    lse = checkpoint_name(lse, ATTENTION_RESIDUALS[1])
    return out, (q, k, v, masks, out, lse)


def _block_attention_bwd(residuals, d_out):
    """FlashAttention's backward, block by block, from the forward's output and log-sum-exp:

        p = exp(s - lse),  dv = pᵀ·dO,  dp = dO·vᵀ,  ds = p ⊙ (dp - δ)  with δ_t = Σ_d dO_td o_td,
        dq = ds·k,  dk = dsᵀ·q.

    The probabilities come back in one fused pass over the scores; softmax's max and sum are
    not recomputed. A row with no allowed key has zero output, hence a zero cotangent through
    the forward's `where`: its p (uniform) meets dO = 0 and contributes nothing.
    """
    q, k, v, masks, out, lse = residuals
    block = masks[0].shape[1]
    f32 = jnp.float32
    any_key = jnp.concatenate([jnp.any(m, axis=-1) for m in masks], axis=1)[:, None, None]
    d_out = jnp.where(any_key[..., None], d_out, 0).astype(q.dtype)
    delta = jnp.sum(d_out.astype(f32) * out.astype(f32), axis=-1)
    dq_blocks = []
    dk = jnp.zeros(k.shape, f32)
    dv = jnp.zeros(v.shape, f32)
    for (lo, hi), mask in zip(query_blocks(q.shape[3], block), masks, strict=True):
        probs = jnp.exp(_block_scores(q, k, mask, lo, hi) - lse[:, :, :, lo:hi, None])
        d_out_block = d_out[:, :, :, lo:hi]
        dv = dv.at[:, :, :hi].add(jnp.einsum(
            "bkgts,bkgtd->bksd", probs.astype(v.dtype), d_out_block, preferred_element_type=f32))
        d_probs = jnp.einsum("bkgtd,bksd->bkgts", d_out_block, v[:, :, :hi],
                             preferred_element_type=f32)
        d_scores = (probs * (d_probs - delta[:, :, :, lo:hi, None])).astype(q.dtype)
        dq_blocks.append(jnp.einsum("bkgts,bksd->bkgtd", d_scores, k[:, :, :hi],
                                    preferred_element_type=f32))
        dk = dk.at[:, :, :hi].add(jnp.einsum(
            "bkgts,bkgtd->bksd", d_scores, q[:, :, :, lo:hi], preferred_element_type=f32))
    dq = jnp.concatenate(dq_blocks, axis=3) if len(dq_blocks) > 1 else dq_blocks[0]
    return dq.astype(q.dtype), dk.astype(k.dtype), dv.astype(v.dtype), None


_block_attention.defvjp(_block_attention_fwd, _block_attention_bwd)


def segment_causal_mask(segment_ids: jax.Array, positions: jax.Array) -> jax.Array:
    """[B, T, T] mask for packed sequences: same nonzero segment and key position ≤ query's."""
    same = segment_ids[:, :, None] == segment_ids[:, None, :]
    real = (segment_ids != 0)[:, :, None] & (segment_ids != 0)[:, None, :]
    causal = positions[:, None, :] <= positions[:, :, None]
    return same & real & causal


def context_mask(positions: jax.Array, context_len: int) -> jax.Array:
    """[B, T, C] mask for cached decoding: key j holds position j, so keep j ≤ query position."""
    return jnp.arange(context_len)[None, None, :] <= positions[:, :, None]
