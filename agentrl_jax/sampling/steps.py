"""The two compiled device programs of the engine: prefill and a chunk of decode steps.

Both are pure functions of (weights, KV pool, batch arrays) → (new pool, sampled tokens). The
engine jits them once per shape bucket with the pool donated, so the pool is updated in place.

* `prefill`: new prompt tokens of several requests [B, T] (one row each, padded to a length
  bucket) against each row's cached context (or none, for fresh prompts), writes their k/v and
  samples the first generated token of each row.
* `decode_chunk`: `num_steps` decode steps of the whole slot batch in one `lax.scan`, sampling on
  device and stopping rows on stop ids / token budget, so the host syncs once per chunk. The
  pool is only read during the chunk; the chunk's own k/v live in a small per-layer buffer and
  are written to the pool once, at the end.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import jax
import jax.numpy as jnp

from agentrl_jax.models.config import ModelConfig
from agentrl_jax.sampling.forward import KVPool, cached_forward, output_logits, write_kv
from agentrl_jax.sampling.sample import row_keys, sample_tokens
from agentrl_jax.sampling.weights import SamplerWeights


@jax.tree_util.register_dataclass
@dataclasses.dataclass
class RowParams:
    """Per-row sampling parameters (see `SamplingParams`); stop_ids is padded with -1."""

    temperature: jax.Array  # f32 [B]
    top_k: jax.Array  # i32 [B]
    top_p: jax.Array  # f32 [B]
    seed: jax.Array  # u32 [B]
    stop_ids: jax.Array  # i32 [B, S]


def _sample(cfg: ModelConfig, w: SamplerWeights, hidden: jax.Array, rp: RowParams,
            positions: jax.Array, bitmask: jax.Array | None):
    logits = output_logits(cfg, w, hidden)
    return sample_tokens(
        logits, rp.temperature, rp.top_k, rp.top_p, row_keys(rp.seed, positions), bitmask
    )


def prefill(
    cfg: ModelConfig,
    page_size: int,
    w: SamplerWeights,
    pool: KVPool,
    tokens: jax.Array,
    start: jax.Array,
    length: jax.Array,
    write_slots: jax.Array,
    page_table: jax.Array | None,
    rp: RowParams,
    bitmask: jax.Array | None = None,
) -> tuple[KVPool, jax.Array, jax.Array]:
    """Prefills rows of new tokens and samples the token after each row's last one.

    Args:
      tokens: int32 [B, T]; row b's new tokens occupy positions start[b] .. start[b]+length[b]-1.
      start: int32 [B], the number of the row's tokens already in the pool.
      length: int32 [B], real tokens in the row (0 for a padding row, whose sample is unused).
      write_slots: int32 [B, T], slot of each new token (0 for padding).
      page_table: int32 [B, W], the row's pages (W · page_size >= start), or None when every
        start is 0.
      bitmask: int32 [B, ceil(V / 32)], the tokens each row may sample (`sample_tokens`), or
        None (a separate compilation).
    Returns:
      the pool, and each row's sampled token and its log-probability.
    """
    t = tokens.shape[1]
    positions = start[:, None] + jnp.arange(t, dtype=start.dtype)[None, :]
    valid = jnp.arange(t)[None, :] < length[:, None]
    causal = jnp.arange(t)[None, :] <= jnp.arange(t)[:, None]
    new_mask = causal[None] & (valid[:, None, :] | jnp.eye(t, dtype=bool)[None])
    hidden, new_k, new_v = cached_forward(
        cfg, w, pool, page_size, tokens, positions, page_table, start, new_mask
    )
    # The scatter must follow every layer's context read, or XLA copies the whole pool to keep
    # the old values for late reads; a dependency on `hidden` (isnan: never true, not foldable)
    # orders it after them.
    write_slots = write_slots + jnp.isnan(hidden[0, 0, 0]).astype(write_slots.dtype)
    pool = write_kv(pool, write_slots, jnp.stack(new_k), jnp.stack(new_v))
    last = jnp.take_along_axis(hidden, jnp.maximum(length - 1, 0)[:, None, None], axis=1)[:, 0]
    token, logprob = _sample(cfg, w, last, rp, start + length, bitmask)
    return pool, token, logprob


def decode_chunk(
    cfg: ModelConfig,
    page_size: int,
    num_steps: int,
    w: SamplerWeights,
    pool: KVPool,
    tokens: jax.Array,
    positions: jax.Array,
    active: jax.Array,
    remaining: jax.Array,
    page_table: jax.Array,
    rp: RowParams,
    bitmask: jax.Array | None = None,
) -> tuple[KVPool, jax.Array, jax.Array, jax.Array]:
    """Runs `num_steps` decode steps for a batch of rows.

    Args:
      tokens: int32 [B], each row's last token, whose k/v is not in the pool yet.
      positions: int32 [B], that token's position.
      active: bool [B]; inactive rows compute but write only to the scratch slot.
      remaining: int32 [B], tokens each row may still generate.
      page_table: int32 [B, W], the row's pages; W · page_size covers positions + num_steps.
      bitmask: int32 [B, ceil(V / 32)], the tokens each row may sample, or None; only with
        num_steps 1 (the next mask depends on the token drawn).
    Returns:
      the pool and per step [num_steps, B]: sampled tokens, log-probabilities, and whether the
      row was active (the token counts) at that step.
    """
    if bitmask is not None and num_steps != 1:
        raise ValueError("a token bitmask holds for one decode step")
    width = page_table.shape[1]
    batch = tokens.shape[0]
    side_shape = (batch, num_steps, cfg.num_kv_heads, cfg.head_dim)
    side_k = tuple(jnp.zeros(side_shape, pool.k.dtype) for _ in range(cfg.num_layers))
    side_v = tuple(jnp.zeros(side_shape, pool.v.dtype) for _ in range(cfg.num_layers))
    first = positions  # the chunk's keys start here; the pool holds positions < first

    def step(carry: tuple, i: jax.Array) -> tuple[tuple, tuple]:
        side_k, side_v, tokens, positions, active, remaining, emitted = carry
        # This step's key is recent key i, always visible (so no row, even an inactive one,
        # attends to nothing: that would be NaN); earlier steps' keys where the row was active.
        emitted = emitted.at[:, i].set(active)
        steps = jnp.arange(num_steps)[None, :]
        new_mask = ((emitted & (steps < i)) | (steps == i))[:, None, :]
        hidden, side_k, side_v = cached_forward(
            cfg, w, pool, page_size, tokens[:, None], positions[:, None], page_table, first,
            new_mask, recent=(side_k, side_v, i),
        )
        new_tokens, logprobs = _sample(cfg, w, hidden[:, 0], rp, positions + 1, bitmask)
        stopped = jnp.any(new_tokens[:, None] == rp.stop_ids, axis=-1)
        remaining = remaining - active.astype(remaining.dtype)
        out = (new_tokens, logprobs)
        tokens = jnp.where(active, new_tokens, tokens)
        positions = positions + active.astype(positions.dtype)
        active = active & ~stopped & (remaining > 0)
        carry = (tuple(side_k), tuple(side_v), tokens, positions, active, remaining, emitted)
        return carry, out

    emitted = jnp.zeros((batch, num_steps), bool)
    init = (side_k, side_v, tokens, positions, active, remaining, emitted)
    carry, (out_tokens, out_logprobs) = jax.lax.scan(step, init, jnp.arange(num_steps))
    side_k, side_v, emitted = carry[0], carry[1], carry[-1]
    # The chunk's keys go into the pool in one scatter: step i of row b is position first[b] + i
    # (a row's active steps are a prefix); inactive steps write to the scratch slot.
    pos = jnp.minimum(first[:, None] + jnp.arange(num_steps)[None, :], width * page_size - 1)
    page = jnp.take_along_axis(page_table, pos // page_size, axis=1)
    write = jnp.where(emitted, page * page_size + pos % page_size, 0)
    # As in `prefill`: the scatter must follow every layer's context read, or XLA copies the
    # whole pool. The scan's loop orders them when it has several steps; a one-step scan is
    # unrolled, so a dependency on the sampled log-probabilities (isnan: never true) does.
    write = write + jnp.isnan(out_logprobs[-1, 0]).astype(write.dtype)
    pool = write_kv(pool, write, jnp.stack(side_k), jnp.stack(side_v))
    return pool, out_tokens, out_logprobs, emitted.T


# XLA's CPU backend hands dots, reductions and elementwise fusions to YNNPACK. In a one-row
# decode chunk its YNNPACK fusions are reductions (the softmax over the vocabulary, attention's
# multiply-reduce; one-row dots stay XLA's own), and without them a SmolLM2-135M step takes
# ~0.83 of the time; from 2 rows up YNNPACK's fusions, its dots among them, are 1.2-3x faster
# (docs/performance.md, "One-row decode without YNNPACK"). So decode programs of at most this
# many rows are compiled without YNNPACK.
NO_YNNPACK_MAX_ROWS = 1
_NO_YNNPACK = {"xla_cpu_experimental_ynn_fusion_type": ""}


class DecodePrograms:
    """The jitted decode chunk, compiled per batch shape, picking its compiler options by rows.

    Called as the jitted function is: (weights, pool, tokens, ...), the pool donated.
    """

    def __init__(self, fn, small_options: dict[str, str] | None):
        jit = functools.partial(jax.jit, donate_argnums=(1,))
        # Any: jit's wrapper type does not declare `_cache_size`, which `num_compiled` reads.
        self._large: Any = jit(fn)
        self._small: Any = jit(fn, compiler_options=small_options) if small_options else self._large

    def _program(self, tokens: jax.Array):
        return self._small if tokens.shape[0] <= NO_YNNPACK_MAX_ROWS else self._large

    def __call__(self, w, pool, tokens, *args):
        return self._program(tokens)(w, pool, tokens, *args)

    def trace(self, w, pool, tokens, *args) -> jax.stages.Traced:
        """The program these arguments would run, traced (as `jax.jit(...).trace`)."""
        return self._program(tokens).trace(w, pool, tokens, *args)

    def num_compiled(self) -> int:
        """Compiled variants so far, of both programs."""
        small = self._small._cache_size() if self._small is not self._large else 0
        return self._large._cache_size() + small


@functools.lru_cache(maxsize=16)
def compile_steps(cfg: ModelConfig, page_size: int, num_steps: int, pool_sharding=None):
    """The jitted (prefill, decode_chunk), pool donated, pool sharding pinned on a mesh.

    Cached, so engines of the same model shape (e.g. re-created ones) share compilations. On
    CPU, decode chunks of at most `NO_YNNPACK_MAX_ROWS` rows compile without YNNPACK.
    """

    def pin(pool: KVPool) -> KVPool:
        if pool_sharding is None:
            return pool
        return jax.lax.with_sharding_constraint(pool, pool_sharding)

    def prefill_fn(w, pool, *args):
        pool, token, logprob = prefill(cfg, page_size, w, pool, *args)
        return pin(pool), token, logprob

    def decode_fn(w, pool, *args):
        pool, *out = decode_chunk(cfg, page_size, num_steps, w, pool, *args)
        return pin(pool), *out

    small_options = _NO_YNNPACK if jax.default_backend() == "cpu" else None
    return jax.jit(prefill_fn, donate_argnums=(1,)), DecodePrograms(decode_fn, small_options)
