"""The decoder forward against the paged KV pool, as the sampler runs it.

Decode is memory-bound, and on CPU every large temporary buffer is allocated and page-faulted in
afresh on each call, so the layout choices here are about bytes moved and bytes kept alive:

* Layers are unrolled over per-layer weight arrays (`SamplerWeights`). A `lax.scan` over the
  stacked [layers, ...] weights makes XLA copy each layer's slice before its matmuls (a dot does
  not read a dynamic slice in place), which at decode doubles the traffic of the weights.
* The pool (`KVPool`) is head-major, [layers, K, slots, D], and is read a page at a time: a
  row's context for kv head k is gathered as whole pages (page_size · D contiguous values) from
  one flat [(layer, head, page), page_size · D] view, straight into the [B, K, C, D] layout
  that the per-head attention matmuls read without a transpose. (Slot-major pages would need
  the gathered context transposed; indexing the layer first would copy the layer's slice.)
  Keys are stored with each page transposed, [D, page_size] (`KVPool.k`): decode scores are
  then a multiply-reduce over D along page_size contiguous keys of the gathered pages. With
  [C, D] keys, XLA's CPU dot repacks every row's gathered keys for the score matmul, which cost
  more than the gather (SmolLM2-135M, batch 32, 256 context, per step: gathers + scores 56 →
  24 ms of the attention's 62 → 44 ms, profiled under load).
* The pool is read-only inside a device call; each layer attends to the cached context in the
  pool plus the keys not yet in it (a prefill's new tokens; the decode chunk's steps so far,
  kept in a small per-layer buffer). The new k/v are scattered into the (donated) pool once, at
  the end of the call, so the pool is updated in place and never copied. (Scattering into the
  pool at every decode step while the same step reads it makes XLA copy the whole pool.)
* Each layer's gather indices carry a data dependency on the previous layer's output, so XLA
  gathers layer by layer. Otherwise it hoists every layer's gather to the start (they depend
  only on the pool) and keeps all of them alive at once.

The transformer block itself is the model's (`decoder.block`), so the arithmetic is the
trainer's. Slot 0 of the pool is scratch: padding and finished rows write there.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

import jax
import jax.numpy as jnp

from agentrl_jax.models import layers as L
from agentrl_jax.models.config import ModelConfig
from agentrl_jax.models.decoder import block
from agentrl_jax.sampling.weights import SamplerWeights


@jax.tree_util.register_dataclass
@dataclasses.dataclass
class KVPool:
    """The sampler's pool of KV slots: v is [layers, kv_heads, slots, head_dim]; k is [layers,
    kv_heads, pages · head_dim, page_size], each page's keys stored transposed, [D, page_size].

    A sequence owns pages of `page_size` consecutive slots (chosen by `PagedKVManager`);
    slot 0 (in page 0) is scratch.
    """

    k: jax.Array
    v: jax.Array

    @classmethod
    def zeros(cls, cfg: ModelConfig, num_slots: int, page_size: int, dtype=None) -> KVPool:
        shape = (cfg.num_layers, cfg.num_kv_heads, num_slots, cfg.head_dim)
        k_shape = (cfg.num_layers, cfg.num_kv_heads, num_slots * cfg.head_dim // page_size,
                   page_size)
        dtype = dtype or cfg.dtype
        return cls(jnp.zeros(k_shape, dtype), jnp.zeros(shape, dtype))


# Logical axes of the pool's dimensions, for sharding it on a mesh (kv heads split).
POOL_AXES = (None, "kv_heads", None, None)


def embed_tokens(cfg: ModelConfig, w: SamplerWeights, tokens: jax.Array) -> jax.Array:
    return jnp.take(w["embed"], tokens, axis=0).astype(cfg.dtype)


def output_logits(cfg: ModelConfig, w: SamplerWeights, hidden: jax.Array) -> jax.Array:
    """fp32 logits, as `Decoder.logits` computes them."""
    out = w["embed"].T if cfg.tie_word_embeddings else w["lm_head"]
    return jnp.einsum(
        "...d,dv->...v", hidden, out.astype(cfg.dtype), preferred_element_type=jnp.float32
    )


def gather_context(pool: jax.Array, layer: int, page_table: jax.Array, page_size: int
                   ) -> jax.Array:
    """Layer `layer`'s cached k (or v) of each row: [B, K, W · page_size, D], position order.

    pool: [layers, K, slots, D]; page_table: int32 [B, W], the row's pages in position order.
    """
    n_layers, kv_heads, slots, head_dim = pool.shape
    n_pages = slots // page_size
    pages = pool.reshape(n_layers * kv_heads * n_pages, page_size * head_dim)
    first = (layer * kv_heads + jnp.arange(kv_heads, dtype=page_table.dtype)) * n_pages
    rows = pages[first[None, :, None] + page_table[:, None, :]]  # [B, K, W, page_size · D]
    return rows.reshape(page_table.shape[0], kv_heads, -1, head_dim)


def gather_keys(pool: jax.Array, layer: int, page_table: jax.Array, head_dim: int
                ) -> jax.Array:
    """Layer `layer`'s cached keys of each row, page by page: [B, K, W, D, page_size].

    pool: [layers, K, pages · D, page_size], each page of a head stored transposed ([D,
    page_size], contiguous), so the gather copies whole pages.
    """
    n_layers, kv_heads, rows, page_size = pool.shape
    pages = pool.reshape(n_layers * kv_heads, rows // head_dim, head_dim, page_size)
    b, width = page_table.shape
    head = jnp.broadcast_to(
        (layer * kv_heads + jnp.arange(kv_heads, dtype=page_table.dtype))[None, :, None],
        (b, kv_heads, width))
    page = jnp.broadcast_to(page_table[:, None, :], (b, kv_heads, width))
    return pages[head, page]  # [B, K, W, D, page_size]


def write_kv(pool: KVPool, write_slots: jax.Array, new_k: jax.Array, new_v: jax.Array
             ) -> KVPool:
    """Scatters new [layers, B, T, K, D] k/v into slots [B, T] of every layer."""
    flat = write_slots.reshape(-1)
    n_layers, b, t, kv_heads, head_dim = new_k.shape
    page_size = pool.k.shape[3]

    def head_major(new):  # [layers, B, T, K, D] -> [layers, K, B·T, D]
        return new.transpose(0, 3, 1, 2, 4).reshape(n_layers, kv_heads, b * t, head_dim)

    # Key d of slot s is at row (s // page_size) · D + d, column s % page_size.
    rows = (flat // page_size * head_dim)[:, None] + jnp.arange(head_dim, dtype=flat.dtype)
    cols = (flat % page_size)[:, None]
    return KVPool(pool.k.at[:, :, rows, cols].set(head_major(new_k)),
                  pool.v.at[:, :, flat].set(head_major(new_v)))


# Decode scores of rows with at most this many queries per kv head are a dot; with more, the
# multiply-reduce (see `_attend`). Read at trace time; `benchmarks/probes/decode_ungrouped.py`
# sets 0 to time the multiply-reduce everywhere.
DOT_DECODE_MAX_GROUPS = 1


def _scores(keys: jax.Array, queries: jax.Array) -> jax.Array:
    """Query-major scores [B, K, Q, N] of keys [B, K, N, D] and queries [B, K, Q, D].

    The dot is arranged so that the larger of the two operands is read in its natural layout
    (XLA transposes the other one first): the keys when there are few queries (decode), the
    queries when there are many (prefill). Either way the result is transposed to query-major
    only when that is the small side.
    """
    f32 = jnp.float32
    if queries.shape[2] <= keys.shape[3]:  # few queries: keys on the left, untransposed
        s = jnp.einsum("bknd,bkqd->bknq", keys, queries, preferred_element_type=f32)
        return s.transpose(0, 1, 3, 2)
    return jnp.einsum("bkqd,bknd->bkqn", queries, keys, preferred_element_type=f32)


def _attend(q, k_ctx, v_ctx, ctx_mask, k_new, v_new, new_mask):
    """Grouped-query attention over cached context keys plus the recent (unpooled) keys.

    q: [B, T, K·G, D]; k_ctx: [B, K, W, D, P] (pages of P transposed keys), v_ctx: [B, K, C, D]
    with C = W · P and ctx_mask [B, C] (or all None: no context); k_new, v_new: [B, R, K, D]
    with new_mask [B, T, R]. Every query sees at least itself among the recent keys, so no row
    is empty. Works per kv head on [B, K, G·T, ...] blocks (query (g, t) is row g·T + t), so
    the context, the largest operand, is read in the layout it was gathered in.
    """
    b, t, heads, d = q.shape
    kv_heads = k_new.shape[2]
    groups = heads // kv_heads
    qq = q.reshape(b, t, kv_heads, groups, d).transpose(0, 2, 3, 1, 4)
    qq = qq.reshape(b, kv_heads, groups * t, d)
    k_new = k_new.transpose(0, 2, 1, 3)  # [B, K, R, D]
    v_new = v_new.transpose(0, 2, 1, 3)
    scale = 1.0 / math.sqrt(d)
    s_new = _scores(k_new, qq) * scale
    mask = jnp.broadcast_to(new_mask[:, None], (b, groups, t, new_mask.shape[2]))
    s_new = jnp.where(mask.reshape(b, 1, groups * t, -1), s_new, -jnp.inf)
    if k_ctx is None:
        probs = jax.nn.softmax(s_new, axis=-1)
        out = jnp.einsum("bkqr,bkrd->bkqd", probs.astype(v_new.dtype), v_new)
    else:
        if t == 1 and groups > DOT_DECODE_MAX_GROUPS:
            # Decode (G queries per row): a multiply-reduce over D, vectorised along the page's
            # page_size contiguous keys, reads the gathered pages as they are. (As a dot, XLA
            # would first transpose them to [D, C], or repack [C, D] keys.) With one query per
            # kv head (G = 1, ungrouped models) XLA CPU lowers this reduction several times
            # slower than the dot below, so those take the dot (benchmarks/probes/decode_ungrouped).
            s_ctx = jnp.sum(k_ctx[:, :, None].astype(jnp.float32)
                            * qq[:, :, :, None, :, None].astype(jnp.float32), axis=4)
        else:
            s_ctx = jnp.einsum("bkqd,bkwdp->bkqwp", qq, k_ctx, preferred_element_type=jnp.float32)
        s_ctx = s_ctx.reshape(b, kv_heads, groups * t, -1)
        s_ctx = s_ctx * scale
        s_ctx = jnp.where(ctx_mask[:, None, None, :], s_ctx, -jnp.inf)
        probs = jax.nn.softmax(jnp.concatenate([s_ctx, s_new], axis=-1), axis=-1)
        c = v_ctx.shape[2]
        out = jnp.einsum("bkqc,bkcd->bkqd", probs[..., :c].astype(v_ctx.dtype), v_ctx)
        out = out + jnp.einsum("bkqr,bkrd->bkqd", probs[..., c:].astype(v_new.dtype), v_new)
    # [B, K, G·T, D] -> [B, T, K·G, D]
    out = out.reshape(b, kv_heads, groups, t, d).transpose(0, 3, 1, 2, 4)
    return out.reshape(b, t, heads, d).astype(q.dtype)


def cached_forward(
    cfg: ModelConfig,
    w: SamplerWeights,
    pool: KVPool,
    page_size: int,
    tokens: jax.Array,
    positions: jax.Array,
    page_table: jax.Array | None,
    cached_len: jax.Array,
    new_mask: jax.Array,
    recent: tuple[Sequence[jax.Array], Sequence[jax.Array], jax.Array] | None = None,
) -> tuple[jax.Array, list[jax.Array], list[jax.Array]]:
    """Final hidden states of new tokens, given the cached context; the pool is only read.

    Each query attends to the row's pooled context (positions < cached_len) and to a block of
    recent keys that are not in the pool: the new tokens themselves (prefill), or, with `recent`,
    the keys of this decode chunk's steps so far, into which the new token's k/v go first.

    Args:
      tokens, positions: int32 [B, T], new tokens (contiguous positions per row).
      page_table: int32 [B, W], the row's pages in position order; None when no row has cached
        context (a fresh prompt), which skips the context read altogether.
      cached_len: int32 [B], positions < cached_len are in the pool; the rest of the pages is
        ignored.
      new_mask: bool [B, T, R], which recent keys (R = T, or the chunk's steps) each query sees.
      recent: per layer, k and v [B, S, K, D] of this decode chunk's steps, and the step index
        where the new token's (T = 1) k/v go.
    Returns:
      hidden [B, T, D], and per layer the recent keys and values: the new tokens' [B, T, K, D],
      or the updated decode-chunk buffers.
    """
    ctx_mask = None
    if page_table is not None:
        width = page_table.shape[1] * page_size
        ctx_mask = jnp.arange(width)[None, :] < cached_len[:, None]

    x = embed_tokens(cfg, w, tokens)
    rope = L.rope_tables(positions, cfg)   # once for all layers
    out_k, out_v = [], []
    for index, p in enumerate(w["layers"]):
        p = {name: v.astype(cfg.dtype) for name, v in p.items()}
        table = page_table
        if table is not None and index > 0:
            # A dependency on the previous layer's output (isnan is never true of real
            # activations, and XLA cannot know that), so this layer's gather waits for it.
            table = table + jnp.isnan(x[0, 0, 0]).astype(table.dtype)

        def attend(q, k, v, index=index, table=table):
            k, v = k.astype(pool.k.dtype), v.astype(pool.v.dtype)
            if recent is not None:
                side_k, side_v, step = recent
                k = jax.lax.dynamic_update_slice_in_dim(side_k[index], k, step, axis=1)
                v = jax.lax.dynamic_update_slice_in_dim(side_v[index], v, step, axis=1)
            out_k.append(k)
            out_v.append(v)
            k, v = k.astype(q.dtype), v.astype(q.dtype)
            if table is None:
                return _attend(q, None, None, None, k, v, new_mask)
            k_ctx = gather_keys(pool.k, index, table, cfg.head_dim).astype(q.dtype)
            v_ctx = gather_context(pool.v, index, table, page_size).astype(q.dtype)
            return _attend(q, k_ctx, v_ctx, ctx_mask, k, v, new_mask)

        x = block(cfg, p, x, rope, attend)
    return L.rms_norm(x, w["final_norm"], cfg.rms_norm_eps), out_k, out_v
