"""Low-rank adapters of a Decoder: add them, separate them from the base, merge them in.

The adapters are parameters of the Decoder itself (`ModelConfig.lora`, `decoder.LoraParam`,
applied unmerged in `decoder.block`), so the training forward, the sampler's paged forward and
sharding need nothing else. Trees here are the pure dicts of `nnx.to_pure_dict`: an adapter
tree is {"layers": {"q_proj_lora_a": [L, in, r], "q_proj_lora_b": [L, r, out], ...}}.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx

from agentrl_jax.models.config import LoraConfig
from agentrl_jax.models.decoder import Decoder, LoraParam, init_adapters, lora_names
from agentrl_jax.tree_digest import tree_fingerprint

Tree = dict[str, Any]


class BaseMismatchError(ValueError):
    """Adapters meet a base model other than the one they were trained over (a checkpoint's
    or a sampling worker's base has another `base_fingerprint`)."""


def split(model: Decoder) -> tuple[nnx.GraphDef, Tree, Tree]:
    """(graphdef, adapters, base) of a Decoder with adapters, as pure dicts (no copies)."""
    graphdef, *states = nnx.split(model, LoraParam, ...)
    adapters, base = states
    return graphdef, nnx.to_pure_dict(adapters), nnx.to_pure_dict(base)


def cast_base(base: Tree, dtype: Any | None) -> Tree:
    """The frozen base as LoRA training holds it: floating arrays cast to `dtype` (e.g.
    bfloat16; None keeps them). Traceable, so the trainer casts on its devices."""
    if not dtype:
        return base

    def cast(x):
        return x.astype(dtype) if jnp.issubdtype(x.dtype, jnp.floating) else x

    return jax.tree.map(cast, base)


def base_fingerprint(base: Tree) -> str:
    """What LoRA adapters are valid over: the fingerprint of the frozen base tree (`split`'s
    base, as `cast_base` holds it), the same however and wherever it is sharded. Checkpoints
    and sampling workers compare it with their own base's."""
    return tree_fingerprint(base)


def combine(base: Tree, adapters: Tree) -> Tree:
    """The full parameter tree: `base` with the adapter entries added (a recursive dict union)."""
    out = dict(base)
    for key, value in adapters.items():
        out[key] = combine(base[key], value) if isinstance(value, dict) and key in base else value
    return out


def with_adapters(model: Decoder, lora: LoraConfig, seed: int = 0) -> Decoder:
    """`model` with fresh adapters (B = 0, so the same outputs); the base arrays are shared."""
    if model.cfg.lora is not None:
        raise ValueError(f"the model has adapters already ({model.cfg.lora})")
    cfg = model.cfg.replace(lora=lora)
    graphdef, _ = nnx.split(nnx.eval_shape(lambda: Decoder(cfg, rngs=nnx.Rngs(0))))
    base = nnx.to_pure_dict(nnx.state(model))
    adapters = {"layers": init_adapters(cfg, jax.random.key(seed))}
    return nnx.merge(graphdef, combine(base, adapters))


def merge_layers(layers: Tree, lora: LoraConfig) -> Tree:
    """Stacked layer weights with each target's adapter folded in, W' = W + scale · A B, and
    the adapter entries dropped (computed in fp32, cast back to W's dtype)."""
    out = dict(layers)
    for target in lora.targets:
        a_name, b_name = lora_names(target)
        a, b, w = out.pop(a_name), out.pop(b_name), layers[target]
        delta = jnp.einsum("lir,lro->lio", a.astype(jnp.float32), b.astype(jnp.float32))
        out[target] = (w.astype(jnp.float32) + lora.scale * delta).astype(w.dtype)
    return out


def merged(model: Decoder) -> Decoder:
    """A plain Decoder (no adapters) computing what `model` computes, W' = W + scale · A B."""
    lora = model.cfg.lora
    if lora is None:
        return model
    cfg = model.cfg.replace(lora=None)
    graphdef, _ = nnx.split(nnx.eval_shape(lambda: Decoder(cfg, rngs=nnx.Rngs(0))))
    params = nnx.to_pure_dict(nnx.state(model))
    return nnx.merge(graphdef, {**params, "layers": merge_layers(params["layers"], lora)})


def without_adapters(model: Decoder) -> Decoder:
    """The base model alone (adapters dropped, not merged); arrays shared."""
    if model.cfg.lora is None:
        return model
    cfg = model.cfg.replace(lora=None)
    graphdef, _ = nnx.split(nnx.eval_shape(lambda: Decoder(cfg, rngs=nnx.Rngs(0))))
    return nnx.merge(graphdef, split(model)[2])
