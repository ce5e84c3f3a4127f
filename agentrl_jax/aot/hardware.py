"""TPU chips as their data sheets state them, and a topology's devices without the chips.

`topology_devices("v5p:4x4x4")` asks libtpu (the `tpu` extra of jax) for the devices of a
slice, on any machine: they can be put in meshes and shardings and compiled for, never run on.
"""

from __future__ import annotations

import dataclasses
import os

import jax


@dataclasses.dataclass(frozen=True)
class Chip:
    """One chip's data-sheet figures: what an ahead-of-time report weighs programs against."""

    name: str
    hbm_bytes: float  # high-bandwidth memory capacity
    hbm_bytes_per_s: float  # its bandwidth
    bf16_flops_per_s: float  # peak dense bf16 matmul throughput
    source: str  # where the figures are stated


GIB = 2**30
# Cloud TPU's per-chip specifications. The pages' HBM "GB" are binary: libtpu's compiler
# refuses a v5p program past 95.74 GiB. Bandwidths are decimal GB/s.
CHIPS = {
    "v5p": Chip("v5p", 95 * GIB, 2765e9, 459e12, "https://cloud.google.com/tpu/docs/v5p"),
    "v5e": Chip("v5e", 16 * GIB, 819e9, 197e12, "https://cloud.google.com/tpu/docs/v5e"),
    "v6e": Chip("v6e", 32 * GIB, 1640e9, 918e12, "https://cloud.google.com/tpu/docs/v6e"),
}
# What libtpu calls each chip (`jax.Device.device_kind`).
DEVICE_KINDS = {"TPU v5": "v5p", "TPU v5p": "v5p", "TPU v5 lite": "v5e", "TPU v6 lite": "v6e"}


def chip_of(device: jax.Device) -> Chip:
    """The data sheet of `device`'s chip."""
    name = DEVICE_KINDS.get(device.device_kind)
    if name is None:
        raise ValueError(f"no data sheet for {device.device_kind!r}; known: {sorted(CHIPS)}")
    return CHIPS[name]


def topology_devices(topology: str) -> list[jax.Device]:
    """The devices of a TPU slice named `CHIP:SHAPE` (e.g. "v5p:2x2x2", 8 chips on 2 hosts;
    "v6e:1x1", one chip), ordered by process, as a real slice numbers them. Needs libtpu
    (`pip install "jax[tpu]"`); no TPU."""
    from jax.experimental import topologies

    # libtpu locks a machine's TPU to one process; with no TPU opened, several may compile.
    os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")
    chip, _, shape = topology.partition(":")
    if chip not in CHIPS or not shape:
        raise ValueError(f"topology {topology!r}: expected CHIP:SHAPE with CHIP one of "
                         f"{sorted(CHIPS)}, e.g. v5p:2x2x2")
    sizes = [int(n) for n in shape.split("x")]
    # A single chip is a host of its own; libtpu's default host (2x2x1) would not divide it.
    options = {"chips_per_host_bounds": (1, 1, 1)} if sizes.count(1) == len(sizes) else {}
    try:
        description = topologies.get_topology_desc(platform="tpu", topology_name=topology,
                                                   **options)
    except (RuntimeError, ValueError) as error:
        raise ValueError(f"libtpu does not know the topology {topology!r}: {error}") from error
    return sorted(description.devices, key=lambda d: (d.process_index, d.id))
