"""Logical axis names → mesh axes.

Parameters name their axes logically (`vocab`, `embed`, `q_heads`, `kv_heads`, `mlp`, `layers`,
`norm`); a rule table, which is config data, maps each name to a mesh axis (`data`, `fsdp`,
`tensor`) or to None (replicated). A dimension that a mesh axis does not divide evenly is left
replicated rather than failing: SmolLM2 has 3 kv heads, a tensor axis of 4 cannot split them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax
from flax import nnx
from jax.sharding import Mesh, NamedSharding, PartitionSpec

Rules = Sequence[tuple[str, str | tuple[str, ...] | None]]

# FSDP shards the model dimension; tensor parallelism splits heads, MLP and vocabulary.
DEFAULT_RULES: Rules = (
    ("batch", ("data", "fsdp")),
    ("vocab", "tensor"),
    ("embed", "fsdp"),
    ("q_heads", "tensor"),
    ("kv_heads", "tensor"),
    ("mlp", "tensor"),
    ("layers", None),
    ("norm", None),
)


def _axis_size(mesh: Mesh, axes: str | tuple[str, ...]) -> int:
    names = (axes,) if isinstance(axes, str) else axes
    size = 1
    for name in names:
        size *= mesh.shape[name]
    return size


def logical_to_spec(
    logical_axes: Sequence[str | None],
    rules: Rules = DEFAULT_RULES,
    mesh: Mesh | None = None,
    shape: Sequence[int] | None = None,
) -> PartitionSpec:
    """The PartitionSpec for an array with the given logical axes.

    With `mesh` and `shape`, mesh axes absent from the mesh, already used by an earlier
    dimension, or not dividing the dimension are dropped (that dimension stays replicated).
    """
    table = dict(rules)
    used: set[str] = set()
    spec = []
    for dim, name in enumerate(logical_axes):
        target = table.get(name) if name is not None else None
        if target is not None and mesh is not None:
            names = (target,) if isinstance(target, str) else tuple(target)
            names = tuple(a for a in names if a in mesh.shape and a not in used)
            target = names if names else None
            if target is not None and shape is not None and shape[dim] % _axis_size(mesh, names):
                target = None
            if target is not None and len(target) == 1:
                target = target[0]
        if target is not None:
            used.update((target,) if isinstance(target, str) else target)
        spec.append(target)
    return PartitionSpec(*spec)


def variable_sharding(
    variable: nnx.Variable, mesh: Mesh, rules: Rules = DEFAULT_RULES
) -> NamedSharding:
    """NamedSharding of one parameter from its `logical_axes` metadata (replicated if none)."""
    axes = variable.get_metadata().get("logical_axes")
    shape = variable.get_value().shape
    if axes is None:
        return NamedSharding(mesh, PartitionSpec())
    return NamedSharding(mesh, logical_to_spec(axes, rules, mesh, shape))


def state_shardings(state: nnx.State, mesh: Mesh, rules: Rules = DEFAULT_RULES):
    """A pytree of NamedShardings matching an `nnx.State` of Variables."""
    return jax.tree.map(
        lambda v: variable_sharding(v, mesh, rules),
        state,
        is_leaf=lambda x: isinstance(x, nnx.Variable),
    )


def abstract_on(tree: Any, shardings: Any = None) -> Any:
    """`tree`'s arrays (concrete or `jax.ShapeDtypeStruct`s) as ShapeDtypeStructs on
    `shardings`: one sharding for every leaf, a tree of them shaped like `tree`, or None. What
    an ahead-of-time compilation lowers on, allocating nothing."""
    if shardings is None or isinstance(shardings, jax.sharding.Sharding):
        return jax.tree.map(
            lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=shardings), tree)
    return jax.tree.map(
        lambda x, s: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s), tree, shardings)


def is_abstract(tree: Any) -> bool:
    """Whether `tree` holds shapes (`jax.ShapeDtypeStruct`) rather than arrays."""
    return any(isinstance(x, jax.ShapeDtypeStruct) for x in jax.tree.leaves(tree))


def shard_model(model: nnx.Module, mesh: Mesh, rules: Rules = DEFAULT_RULES) -> nnx.Module:
    """Places every parameter of `model` by its logical axes over `mesh`, in place."""
    state = nnx.state(model)
    shardings = state_shardings(state, mesh, rules)
    values = jax.tree.map(
        lambda v: v[...], state, is_leaf=lambda x: isinstance(x, nnx.Variable)
    )
    placed = jax.device_put(values, shardings)
    nnx.update(model, placed)
    return model
