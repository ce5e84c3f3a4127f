"""The decoder: one Flax NNX module for Llama / SmolLM2, Qwen2 / Qwen2.5 and GLM-4-0414.

Layer parameters are stacked along a leading `layers` axis and the forward scans over them, so
compile time does not grow with depth and every layer shards the same way. Every parameter
carries logical axis names (`logical_axes` metadata) that `parallel.sharding` maps to mesh axes.

Two ways in:
  * training: `hidden(tokens, positions, segment_ids)` over packed/padded sequences, then
    `logits(h)` or `models.logprobs.token_logprobs` (chunked over the vocabulary projection);
  * sampling: `hidden_cached(tokens, positions, cache, write_slots, read_slots)` reads and
    writes a paged KV cache (`KVCache`), the hook the sampling engine builds on.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
from flax import nnx

from agentrl_jax.models import layers as L
from agentrl_jax.models.config import ModelConfig
from agentrl_jax.models.matmul import linear


@jax.tree_util.register_dataclass
@dataclasses.dataclass
class KVCache:
    """A pool of KV slots shared by all sequences: k, v are [layers, slots, kv_heads, head_dim].

    A sequence owns a list of slots (in pages, chosen by the sampler); slot 0 is by convention a
    scratch slot that padding tokens write to.
    """

    k: jax.Array
    v: jax.Array

    @classmethod
    def zeros(cls, cfg: ModelConfig, num_slots: int, dtype=None) -> KVCache:
        shape = (cfg.num_layers, num_slots, cfg.num_kv_heads, cfg.head_dim)
        dtype = dtype or cfg.dtype
        return cls(jnp.zeros(shape, dtype), jnp.zeros(shape, dtype))

    @property
    def num_slots(self) -> int:
        return self.k.shape[1]


# Query block of the training attention (`layers.block_causal_attention`): smaller blocks skip
# more of the masked upper triangle but run more, smaller matmuls.
ATTENTION_BLOCK = 128


def checkpoint_policy(remat: bool):
    """What a training block keeps for its backward pass (`jax.checkpoint` policy).

    Without `remat`: the projections' outputs (matmuls without batch axes) and the attention's
    output and log-sum-exp (`layers.ATTENTION_RESIDUALS`, what its FlashAttention backward
    needs); norms, rotary and activations are recomputed from them: on CPU writing and
    re-reading every [B·T, intermediate] intermediate of 30 layers costs more than the
    recomputation. With `remat`, nothing: the block is recomputed from its input alone.
    """
    if remat:
        return jax.checkpoint_policies.nothing_saveable
    return jax.checkpoint_policies.save_from_both_policies(
        jax.checkpoint_policies.dots_with_no_batch_dims_saveable,
        jax.checkpoint_policies.save_only_these_names(*L.ATTENTION_RESIDUALS))


class LoraParam(nnx.Param):
    """An adapter parameter (`ModelConfig.lora`): its own type, so that filters can tell the
    trainable adapters from the frozen base (`nnx.split(model, LoraParam, ...)`)."""


def lora_names(target: str) -> tuple[str, str]:
    """The per-layer parameter names of the adapter (A, B) on projection `target`."""
    return f"{target}_lora_a", f"{target}_lora_b"


# name -> (shape builder, logical axes, initialiser); the leading "layers" axis is added below.
def _layer_param_specs(cfg: ModelConfig) -> dict:
    d, i = cfg.hidden_size, cfg.intermediate_size
    normal, ones, zeros = "normal", "ones", "zeros"
    specs = {
        "input_norm": ((d,), ("norm",), ones),
        "q_proj": ((d, cfg.q_dim), ("embed", "q_heads"), normal),
        "k_proj": ((d, cfg.kv_dim), ("embed", "kv_heads"), normal),
        "v_proj": ((d, cfg.kv_dim), ("embed", "kv_heads"), normal),
        "o_proj": ((cfg.q_dim, d), ("q_heads", "embed"), normal),
        "mlp_norm": ((d,), ("norm",), ones),
        "gate_proj": ((d, i), ("embed", "mlp"), normal),
        "up_proj": ((d, i), ("embed", "mlp"), normal),
        "down_proj": ((i, d), ("mlp", "embed"), normal),
    }
    if cfg.qkv_bias:
        specs["q_bias"] = ((cfg.q_dim,), ("q_heads",), zeros)
        specs["k_bias"] = ((cfg.kv_dim,), ("kv_heads",), zeros)
        specs["v_bias"] = ((cfg.kv_dim,), ("kv_heads",), zeros)
    if cfg.sandwich_norms:
        specs["post_attn_norm"] = ((d,), ("norm",), ones)
        specs["post_mlp_norm"] = ((d,), ("norm",), ones)
    return specs


def _adapter_specs(cfg: ModelConfig) -> dict:
    """Adapter parameters of `cfg.lora`: A [in, r] (PEFT's uniform init), B [r, out] zeros.

    A shards like its projection's input dimension, B like its output; the rank stays whole.
    """
    if cfg.lora is None:
        return {}
    base, rank = _layer_param_specs(cfg), cfg.lora.rank
    specs = {}
    for target in cfg.lora.targets:
        (d_in, d_out), (ax_in, ax_out), _ = base[target]
        a, b = lora_names(target)
        specs[a] = ((d_in, rank), (ax_in, "lora_rank"), "lora_a")
        specs[b] = ((rank, d_out), ("lora_rank", ax_out), "zeros")
    return specs


def _init(kind: str, key: jax.Array, shape: tuple[int, ...], dtype) -> jax.Array:
    if kind == "ones":
        return jnp.ones(shape, dtype)
    if kind == "zeros":
        return jnp.zeros(shape, dtype)
    if kind == "lora_a":  # kaiming_uniform(a=√5) of torch / PEFT: U(±1/√fan_in)
        bound = 1.0 / shape[-2] ** 0.5
        return jax.random.uniform(key, shape, dtype, -bound, bound)
    return 0.02 * jax.random.normal(key, shape, dtype)


def init_adapters(cfg: ModelConfig, key: jax.Array) -> dict[str, jax.Array]:
    """Fresh stacked adapter parameters of `cfg.lora` ({name: [layers, ...]}; B = 0)."""
    specs = _adapter_specs(cfg)
    keys = jax.random.split(key, max(len(specs), 1))
    return {name: _init(kind, k, (cfg.num_layers, *shape), cfg.param_dtype)
            for k, (name, (shape, _, kind)) in zip(keys, specs.items(), strict=False)}


class DecoderLayers(nnx.Module):
    """All transformer blocks, each parameter stacked as [num_layers, ...]."""

    def __init__(self, cfg: ModelConfig, *, rngs: nnx.Rngs):
        base, adapters = _layer_param_specs(cfg), _adapter_specs(cfg)
        self.names = (*base, *adapters)
        for name, (shape, axes, kind) in {**base, **adapters}.items():
            value = _init(kind, rngs.params(), (cfg.num_layers, *shape), cfg.param_dtype)
            kind_of = LoraParam if name in adapters else nnx.Param
            setattr(self, name, kind_of(value, logical_axes=("layers", *axes)))

    def stacked(self) -> dict[str, jax.Array]:
        return {name: getattr(self, name)[...] for name in self.names}


def block(cfg: ModelConfig, p: dict, x: jax.Array, rope: tuple[jax.Array, jax.Array],
          attend) -> jax.Array:
    """One pre-norm block; `attend(q, k, v)` supplies the attention over whatever keys apply.

    `rope`: the rotary tables `layers.rope_tables(positions, cfg)`, computed once for a stack of
    blocks. With `cfg.lora`, the targeted projections add their adapters unmerged
    (`layers.lora_linear`); `p` then holds the adapters' A and B beside the weights.
    """
    b, t, d = x.shape
    # The projections run on [B·T, D]: with a [B, T, D] operand each weight gradient contracts
    # over two axes, which XLA CPU lowers to a transposed copy of the (large) output gradient
    # before the matmul; over one axis it is a single matmul.
    x = x.reshape(b * t, d)

    def project(h, name):
        if cfg.lora is not None and name in cfg.lora.targets:
            a_name, b_name = lora_names(name)
            return L.lora_linear(h, p[name], p[a_name], p[b_name], cfg.lora.scale)
        return linear(h, p[name])

    h = L.rms_norm(x, p["input_norm"], cfg.rms_norm_eps)
    q, k, v = project(h, "q_proj"), project(h, "k_proj"), project(h, "v_proj")
    if cfg.qkv_bias:
        q, k, v = q + p["q_bias"], k + p["k_bias"], v + p["v_bias"]
    q = L.apply_rope(q.reshape(b, t, cfg.num_heads, cfg.head_dim), rope, cfg)
    k = L.apply_rope(k.reshape(b, t, cfg.num_kv_heads, cfg.head_dim), rope, cfg)
    v = v.reshape(b, t, cfg.num_kv_heads, cfg.head_dim)
    attn = project(attend(q, k, v).reshape(b * t, cfg.q_dim), "o_proj")
    if cfg.sandwich_norms:
        attn = L.rms_norm(attn, p["post_attn_norm"], cfg.rms_norm_eps)
    x = x + attn
    h = L.rms_norm(x, p["mlp_norm"], cfg.rms_norm_eps)
    mlp = project(jax.nn.silu(project(h, "gate_proj")) * project(h, "up_proj"), "down_proj")
    if cfg.sandwich_norms:
        mlp = L.rms_norm(mlp, p["post_mlp_norm"], cfg.rms_norm_eps)
    return (x + mlp).reshape(b, t, d)


class Decoder(nnx.Module):
    """Decoder-only transformer; see the module docstring for the two entry points."""

    def __init__(self, cfg: ModelConfig, *, rngs: nnx.Rngs):
        self.cfg = cfg
        d, vocab = cfg.hidden_size, cfg.vocab_size
        self.embed = nnx.Param(
            _init("normal", rngs.params(), (vocab, d), cfg.param_dtype),
            logical_axes=("vocab", "embed"),
        )
        self.layers = DecoderLayers(cfg, rngs=rngs)
        self.final_norm = nnx.Param(jnp.ones((d,), cfg.param_dtype), logical_axes=("norm",))
        if not cfg.tie_word_embeddings:
            self.lm_head = nnx.Param(
                _init("normal", rngs.params(), (d, vocab), cfg.param_dtype),
                logical_axes=("embed", "vocab"),
            )

    # ---- pieces ---------------------------------------------------------------------------

    def _embed(self, tokens: jax.Array) -> jax.Array:
        return jnp.take(self.embed[...], tokens, axis=0).astype(self.cfg.dtype)

    def _stacked_layers(self) -> dict[str, jax.Array]:
        return {k: v.astype(self.cfg.dtype) for k, v in self.layers.stacked().items()}

    def output_embedding(self) -> jax.Array:
        """The [hidden, vocab] projection to logits (the embedding, transposed, when tied)."""
        if self.cfg.tie_word_embeddings:
            return self.embed[...].T
        return self.lm_head[...]

    def logits(self, hidden: jax.Array) -> jax.Array:
        """fp32 logits [..., vocab] of final hidden states."""
        w = self.output_embedding().astype(self.cfg.dtype)
        return jnp.einsum("...d,dv->...v", hidden, w, preferred_element_type=jnp.float32)

    # ---- training forward ----------------------------------------------------------------

    def hidden(
        self,
        tokens: jax.Array,
        positions: jax.Array,
        segment_ids: jax.Array,
        *,
        remat: bool = False,
    ) -> jax.Array:
        """Final hidden states [B, T, hidden] of packed or padded sequences.

        Args:
          tokens, positions, segment_ids: int32 [B, T]. Tokens attend causally (by position)
            to tokens of the same nonzero segment; segment 0 is padding. A segment's tokens
            must appear in position order (as packing and left/right padding lay them out):
            keys after a query's own index are never looked at.
          remat: recompute each block in the backward pass from its input alone; without, the
            projections' outputs are kept and the rest of the block is recomputed.
        """
        cfg = self.cfg
        masks = L.segment_causal_block_masks(segment_ids, positions, ATTENTION_BLOCK)
        rope = L.rope_tables(positions, cfg)

        def attend(q, k, v):
            return L.block_causal_attention(q, k, v, masks)

        def body(x, p):
            return block(cfg, p, x, rope, attend), None

        body = jax.checkpoint(body, policy=checkpoint_policy(remat))
        x, _ = jax.lax.scan(body, self._embed(tokens), self._stacked_layers())
        return L.rms_norm(x, self.final_norm[...], cfg.rms_norm_eps)

    def __call__(
        self, tokens: jax.Array, positions: jax.Array, segment_ids: jax.Array
    ) -> jax.Array:
        """fp32 logits [B, T, vocab]. Prefer `token_logprobs` when only targets matter."""
        return self.logits(self.hidden(tokens, positions, segment_ids))

    # ---- sampling forward ----------------------------------------------------------------

    def hidden_cached(
        self,
        tokens: jax.Array,
        positions: jax.Array,
        cache: KVCache,
        write_slots: jax.Array,
        read_slots: jax.Array,
    ) -> tuple[jax.Array, KVCache]:
        """Prefill or decode against a paged KV cache.

        Args:
          tokens, positions: int32 [B, T], the new tokens of each sequence and their positions.
          cache: the slot pool.
          write_slots: int32 [B, T], the slot each new token's k/v goes to (0 for padding).
          read_slots: int32 [B, C], the slots of each sequence's context in position order
            (entry j holds position j); entries past a query's position are masked.
        Returns:
          final hidden states [B, T, hidden] and the updated cache.
        """
        cfg = self.cfg
        mask = L.context_mask(positions, read_slots.shape[1])
        rope = L.rope_tables(positions, cfg)
        flat_write = write_slots.reshape(-1)

        def body(carry, xs):
            x, ck, cv = carry
            p, layer = xs
            new_kv = {}

            def attend(q, k, v):
                nk = ck[layer].at[flat_write].set(k.reshape(-1, *k.shape[2:]).astype(ck.dtype))
                nv = cv[layer].at[flat_write].set(v.reshape(-1, *v.shape[2:]).astype(cv.dtype))
                new_kv["k"], new_kv["v"] = nk, nv
                keys = nk[read_slots].astype(q.dtype)
                values = nv[read_slots].astype(q.dtype)
                return L.attention(q, keys, values, mask)

            x = block(cfg, p, x, rope, attend)
            ck = jax.lax.dynamic_update_index_in_dim(ck, new_kv["k"], layer, axis=0)
            cv = jax.lax.dynamic_update_index_in_dim(cv, new_kv["v"], layer, axis=0)
            return (x, ck, cv), None

        layer_ids = jnp.arange(cfg.num_layers)
        (x, k, v), _ = jax.lax.scan(
            body, (self._embed(tokens), cache.k, cache.v), (self._stacked_layers(), layer_ids)
        )
        return L.rms_norm(x, self.final_norm[...], cfg.rms_norm_eps), KVCache(k, v)
