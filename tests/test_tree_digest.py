"""Tree digests: the update checksum (SHA-256 of host bytes) and the base fingerprint, which is
computed where the arrays are and must not depend on how they are sharded."""

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from agentrl_jax.tree_digest import tree_digest, tree_fingerprint


def _base():
    rng = np.random.default_rng(0)
    return {"embed": rng.normal(size=(64, 16)).astype(np.float32),
            "layers": {"q_proj": rng.normal(size=(2, 16, 8)).astype(np.float32),
                       "norm": rng.normal(size=(2, 16)).astype(np.float32)},
            "step": np.arange(8, dtype=np.int32)}


def _sharded(tree, mesh):
    specs = {"embed": PartitionSpec("fsdp", "tensor"),
             "layers": {"q_proj": PartitionSpec(None, "fsdp", "tensor"),
                        "norm": PartitionSpec(None, "tensor")},
             "step": PartitionSpec("fsdp")}
    return jax.tree.map(lambda x, s: jax.device_put(x, NamedSharding(mesh, s)), tree, specs)


def test_fingerprint_is_the_same_however_the_base_is_sharded():
    base = _base()
    want = tree_fingerprint(base)
    devices = np.array(jax.devices()[:8])
    for shape in ((2, 4), (4, 2), (8, 1)):
        mesh = Mesh(devices.reshape(shape), ("fsdp", "tensor"))
        placed = _sharded(base, mesh)
        assert not placed["embed"].sharding.is_fully_replicated
        assert tree_fingerprint(placed) == want
    one_device = jax.device_put(base, jax.devices()[3])
    assert tree_fingerprint(one_device) == want
    assert tree_fingerprint(base) == want  # deterministic


def test_fingerprint_tells_bases_apart():
    base = _base()
    want = tree_fingerprint(base)
    mesh = Mesh(np.array(jax.devices()[:8]).reshape(2, 4), ("fsdp", "tensor"))

    def changed(edit):
        tree = jax.tree.map(np.copy, base)
        edit(tree)
        return tree

    def flip_one_value(t):
        t["layers"]["q_proj"][1, 7, 3] = np.nextafter(t["layers"]["q_proj"][1, 7, 3], 9.0)

    def swap_two_rows(t):
        t["embed"][[5, 40]] = t["embed"][[40, 5]]

    def rename(t):
        t["layers"]["k_proj"] = t["layers"].pop("q_proj")

    def transpose(t):  # the same values in another shape
        t["layers"]["norm"] = np.ascontiguousarray(t["layers"]["norm"]).reshape(16, 2)

    variants = [changed(e) for e in (flip_one_value, swap_two_rows, rename, transpose)]
    variants.append(jax.tree.map(lambda x: x.astype(jnp.bfloat16)
                                 if x.dtype == np.float32 else x, base))  # another dtype
    fingerprints = {tree_fingerprint(v) for v in variants} | {want}
    assert len(fingerprints) == len(variants) + 1
    # Still told apart when sharded.
    assert tree_fingerprint(_sharded(variants[0], mesh)) == tree_fingerprint(variants[0])
    assert tree_fingerprint(_sharded(variants[0], mesh)) != want


def test_digest_is_of_the_host_bytes():
    base = _base()
    assert tree_digest(base) == tree_digest(jax.device_put(base, jax.devices()[1]))
    other = jax.tree.map(np.copy, base)
    other["step"][0] = 1
    assert tree_digest(other) != tree_digest(base)
