"""Digests of array pytrees: the checksum of a weight update, the fingerprint of a base model.

Both cover every leaf's path, dtype, shape and values in a fixed (sorted-path) order, so two
trees have the same digest exactly when they hold the same arrays under the same names.

* `tree_digest` is a SHA-256 of the bytes: the checksum of an update, which is small and is on
  one host anyway (it was sent there). Leaves are brought to the host one at a time, so each
  must be fully addressable from this process.
* `tree_fingerprint` is computed where the arrays are, for a base model that may be sharded
  over several processes, none of which holds it whole: each leaf is reduced on its devices to
  a few 32-bit sums of mixed (value, position) words, `Σ_i mix(w_i ⊕ mix(i + c_k))` for lanes
  k. Integer addition mod 2³² is exact and order-free, so the sums do not depend on how the
  array is sharded or on which process reads them: a trainer on a multi-host mesh, a sampling
  worker on one device and an export on a host all get the same fingerprint of the same base.
  It tells bases apart (any changed, moved or missing value changes it); it is not a defence
  against someone forging a base on purpose.
"""

from __future__ import annotations

import functools
import hashlib
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec

# Independent 32-bit sums per leaf (a 128-bit fingerprint of each array).
_LANES = (0x9E3779B9, 0x7F4A7C15, 0x85EBCA77, 0xC2B2AE3D)


def tree_digest(tree: Any) -> str:
    """Hex SHA-256 of the arrays of `tree` (jax or numpy leaves) with their paths."""
    h = hashlib.sha256()
    for path, leaf in _sorted_leaves(tree):
        value = np.ascontiguousarray(np.asarray(jax.device_get(leaf)))
        h.update(path.encode())
        h.update(f"|{value.dtype.str}|{value.shape}|".encode())
        h.update(value.tobytes())
    return h.hexdigest()


def layered_digest(tree: Any) -> str:
    """`tree_digest` of `tree` with each list leaf (a stacked parameter as `ParamGather` leaves
    it: one array per layer) stacked, computed one layer at a time without stacking: the
    checksum a sampler that received its weights layer by layer reports for the weights the
    trainer published whole."""
    h = hashlib.sha256()
    leaves = jax.tree_util.tree_flatten_with_path(tree, is_leaf=lambda x: isinstance(x, list))[0]
    for path, leaf in sorted(((jax.tree_util.keystr(p), x) for p, x in leaves),
                             key=lambda kv: kv[0]):
        parts = leaf if isinstance(leaf, list) else [leaf]
        first = parts[0]
        dtype = np.dtype(first.dtype)
        shape = (len(parts), *first.shape) if isinstance(leaf, list) else tuple(first.shape)
        h.update(path.encode())
        h.update(f"|{dtype.str}|{shape}|".encode())
        for part in parts:
            h.update(np.ascontiguousarray(np.asarray(jax.device_get(part))).tobytes())
    return h.hexdigest()


def tree_fingerprint(tree: Any) -> str:
    """Hex fingerprint of `tree`'s arrays with their paths, independent of their sharding.

    Leaves may be numpy arrays or jax Arrays sharded over devices of several processes (every
    process must then call it, as for any computation over those arrays: the same result on
    each).
    """
    h = hashlib.sha256()
    for path, leaf in _sorted_leaves(tree):
        dtype, shape = np.dtype(leaf.dtype), tuple(leaf.shape)
        h.update(path.encode())
        h.update(f"|{dtype.str}|{shape}|".encode())
        h.update(_leaf_sums(leaf).tobytes())
    return h.hexdigest()


def _sorted_leaves(tree: Any) -> list[tuple[str, Any]]:
    leaves = jax.tree_util.tree_flatten_with_path(tree)[0]
    return sorted(((jax.tree_util.keystr(path), leaf) for path, leaf in leaves),
                  key=lambda kv: kv[0])


def _mix32(x: jax.Array) -> jax.Array:
    """The murmur3 finaliser: a bijection of uint32 in which every input bit moves every
    output bit."""
    x = x ^ (x >> 16)
    x = x * jnp.uint32(0x85EBCA6B)
    x = x ^ (x >> 13)
    x = x * jnp.uint32(0xC2B2AE35)
    return x ^ (x >> 16)


def _words(x: jax.Array) -> jax.Array:
    """The array's bits as uint32 words: one per element (two, along a new last axis, for
    64-bit elements)."""
    if x.dtype == jnp.bool_:
        return x.astype(jnp.uint32)
    bits = np.dtype(x.dtype).itemsize * 8
    if bits == 32 or bits == 64:
        return jax.lax.bitcast_convert_type(x, jnp.uint32)
    return jax.lax.bitcast_convert_type(x, jnp.dtype(f"uint{bits}")).astype(jnp.uint32)


def _sums(x: jax.Array) -> jax.Array:
    """[lanes] uint32: Σ_i mix(w_i ⊕ mix(i + c_k)) over the words w_i at flat positions i."""
    words = _words(x)
    index = jnp.zeros(words.shape, jnp.uint32)
    stride = 1
    for axis in reversed(range(words.ndim)):
        index = index + jax.lax.broadcasted_iota(jnp.uint32, words.shape, axis) * jnp.uint32(
            stride % (1 << 32))
        stride *= words.shape[axis]
    return jnp.stack([jnp.sum(_mix32(words ^ _mix32(index + jnp.uint32(c))), dtype=jnp.uint32)
                      for c in _LANES])


_SUMS = jax.jit(_sums)


@functools.cache
def _replicated_sums(mesh: jax.sharding.Mesh):
    """`_sums` with its (tiny) result replicated over `mesh`, so every process holds it."""
    return jax.jit(_sums, out_shardings=NamedSharding(mesh, PartitionSpec()))


def _leaf_sums(leaf: Any) -> np.ndarray:
    """The lane sums of one leaf, computed on the devices that hold it, read on this host."""
    sharding = getattr(leaf, "sharding", None)
    if isinstance(leaf, jax.Array) and isinstance(sharding, NamedSharding):
        out = _replicated_sums(sharding.mesh)(leaf)
    else:
        out = _SUMS(leaf)
    return np.asarray(out.addressable_data(0), np.uint32)
