"""The sampler's view of a policy's parameters: flat pytrees placed on the sampler mesh.

Two layouts:
  * `Weights` (what `weights_of` returns, what weight sync and callers hand the engine): the
    decoder's arrays, layer parameters stacked as [layers, ...];
  * `SamplerWeights` (what the compiled steps read): the same, with the layers split into one
    dict of arrays per layer. The sampler unrolls its layers over these, so a layer's matmuls
    read its weights in place; slicing a stacked array inside a layer scan makes XLA copy the
    slice first, which at decode (memory-bound) would double the weight traffic.

The engine's compiled steps take the weights as an argument, so swapping in new weights of the
same shapes, dtypes and shardings never recompiles. Weights arriving from the trainer (any
sharding) are placed on the sampler's shardings, or on one device without a mesh, with one
`jax.device_put` (`place_weights`), then split by a jitted function (compiled once per engine).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from agentrl_jax.models.decoder import Decoder
from agentrl_jax.parallel import sharding as sharding_lib

Weights = dict[str, Any]  # {"embed", "final_norm", "layers": {name: [L, ...]}, ["lm_head"]}
# {"embed", "final_norm", "layers": ({name: array}, ...) one dict per layer, ["lm_head"]}
SamplerWeights = dict[str, Any]


def _variables(model: Decoder) -> dict[str, Any]:
    """The Decoder's parameter Variables in the sampler's layout."""
    out: dict[str, Any] = {
        "embed": model.embed,
        "final_norm": model.final_norm,
        "layers": {name: getattr(model.layers, name) for name in model.layers.names},
    }
    if not model.cfg.tie_word_embeddings:
        out["lm_head"] = model.lm_head
    return out


def _is_variable(x) -> bool:
    return isinstance(x, nnx.Variable)


def weights_of(model: Decoder) -> Weights:
    """The arrays of a Decoder's parameters (no copy)."""
    return jax.tree.map(lambda v: v[...], _variables(model), is_leaf=_is_variable)


def weight_shardings(
    model: Decoder, mesh: Mesh | None, rules: sharding_lib.Rules = sharding_lib.DEFAULT_RULES
) -> Any:
    """NamedShardings for `weights_of(model)` on `mesh` from the logical axis names (or None)."""
    if mesh is None:
        return None
    return jax.tree.map(
        lambda v: sharding_lib.variable_sharding(v, mesh, rules),
        _variables(model),
        is_leaf=_is_variable,
    )


def place_weights(weights: Any, shardings: Any) -> Any:
    """`weights` on `shardings` (from `weight_shardings` on a mesh), or, when that is None (no
    mesh), on this process's first device, whatever sharding they arrive with.

    jit keys its programs by their arguments' shardings: weights synced from a trainer's
    one-device mesh (a NamedSharding) beside an engine's first weights (a single device) would
    compile every sampler program a second time.
    """
    return jax.device_put(weights, jax.local_devices()[0] if shardings is None else shardings)


def split_layers(weights: Weights, dtype: Any = None) -> SamplerWeights:
    """The sampler layout of `weights`: the stacked layer parameters split per layer, every
    floating array cast to `dtype` (None: kept as it is)."""
    weights = cast_floating(weights, dtype)
    stacked = weights["layers"]
    n_layers = next(iter(stacked.values())).shape[0]
    layers = tuple({name: v[i] for name, v in stacked.items()} for i in range(n_layers))
    return {**weights, "layers": layers}


def cast_floating(tree: Any, dtype: Any = None) -> Any:
    """`tree` with every floating array cast to `dtype` (None: `tree` itself)."""
    if dtype is None:
        return tree
    return jax.tree.map(
        lambda x: x.astype(dtype) if jnp.issubdtype(x.dtype, jnp.floating) else x, tree)


def split_shardings(shardings: Any, num_layers: int) -> Any:
    """`split_layers` applied to the NamedShardings of `Weights` (the layer axis dropped)."""
    if shardings is None:
        return None

    def drop_layer_axis(s: NamedSharding) -> NamedSharding:
        return NamedSharding(s.mesh, PartitionSpec(*tuple(s.spec)[1:]))

    per_layer = {name: drop_layer_axis(s) for name, s in shardings["layers"].items()}
    return {**shardings, "layers": tuple(dict(per_layer) for _ in range(num_layers))}


def replicated(mesh: Mesh | None) -> NamedSharding | None:
    return None if mesh is None else NamedSharding(mesh, PartitionSpec())


@dataclasses.dataclass(frozen=True, eq=False)
class PolicyWeights:
    """One version of one named policy, as the engine serves it.

    Compared by identity: a request pins the object it started with, so "finish on the old
    weights" keeps the old arrays alive exactly as long as some request still uses them.
    """

    name: str
    version: int
    weights: SamplerWeights
    serial: int = 0  # which install this is (the engine counts them)

    @property
    def tag(self) -> tuple[str, int, int]:
        """What cached KV is valid for: the (policy, version) that computed it, and the install
        serial, so that weights re-installed under a version number already used never share
        KV with the earlier ones."""
        return self.name, self.version, self.serial
