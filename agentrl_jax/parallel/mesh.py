"""Device meshes: the trainer mesh (data × fsdp × tensor) and sampler/trainer device splits.

Meshes are plain `jax.sharding.Mesh` objects with named axes. We build them directly rather than
through `jax.make_mesh`, which in recent JAX creates Explicit-sharding axes; the rest of the code
uses GSPMD-style (auto) sharding driven by NamedShardings.
"""

from __future__ import annotations

from collections.abc import Sequence

import jax
import numpy as np
from jax.sharding import Mesh

MESH_AXES = ("data", "fsdp", "tensor")


def make_mesh(
    data: int = 1,
    fsdp: int = -1,
    tensor: int = 1,
    devices: Sequence[jax.Device] | None = None,
) -> Mesh:
    """A ('data', 'fsdp', 'tensor') mesh over `devices` (default: all of them).

    One size may be -1: it takes whatever the others leave. Devices are laid out tensor-fastest,
    so tensor-parallel peers are neighbours (the same host, the fastest links).
    """
    devices = list(jax.devices() if devices is None else devices)
    sizes = [data, fsdp, tensor]
    if sizes.count(-1) > 1:
        raise ValueError(f"at most one mesh size may be -1, got {sizes}")
    known = int(np.prod([s for s in sizes if s != -1]))
    if -1 in sizes:
        if len(devices) % known:
            raise ValueError(f"{len(devices)} devices are not divisible by {known}")
        sizes[sizes.index(-1)] = len(devices) // known
    if int(np.prod(sizes)) != len(devices):
        shape = dict(zip(MESH_AXES, sizes, strict=True))
        raise ValueError(f"mesh {shape} needs {np.prod(sizes)} devices, got {len(devices)}")
    return Mesh(np.asarray(devices, dtype=object).reshape(sizes), MESH_AXES)


def single_device_mesh() -> Mesh:
    """The mesh of this process's first device alone (every axis of size 1): where a stage
    that runs on one device, such as the warm start or RL on one machine, trains."""
    return make_mesh(1, 1, 1, devices=jax.devices()[:1])


def split_devices(
    num_sampler: int, devices: Sequence[jax.Device] | None = None
) -> tuple[list[jax.Device], list[jax.Device]]:
    """Disaggregated layout: the first `num_sampler` devices sample, the rest train."""
    devices = list(jax.devices() if devices is None else devices)
    if not 0 < num_sampler < len(devices):
        raise ValueError(f"cannot give {num_sampler} of {len(devices)} devices to the sampler")
    return devices[:num_sampler], devices[num_sampler:]
