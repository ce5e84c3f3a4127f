"""SHA-256 digests of array pytrees: the fingerprint of a base model, the checksum of an update.

The digest covers every leaf's path, dtype, shape and bytes in a fixed (sorted-path) order, so
two trees have the same digest exactly when they hold the same arrays under the same names.
Leaves are brought to the host one at a time (an array must be fully addressable here).
"""

from __future__ import annotations

import hashlib
from typing import Any

import jax
import numpy as np


def tree_digest(tree: Any) -> str:
    """Hex SHA-256 of the arrays of `tree` (jax or numpy leaves) with their paths."""
    leaves = jax.tree_util.tree_flatten_with_path(tree)[0]
    h = hashlib.sha256()
    for path, leaf in sorted(leaves, key=lambda kv: jax.tree_util.keystr(kv[0])):
        value = np.ascontiguousarray(np.asarray(jax.device_get(leaf)))
        h.update(jax.tree_util.keystr(path).encode())
        h.update(f"|{value.dtype.str}|{value.shape}|".encode())
        h.update(value.tobytes())
    return h.hexdigest()
