"""How a pod's devices divide between sampler replicas and the trainer (`launch.tpu_pod`).

Config (`mesh`):

    sampler_devices              process 0's first local devices that sample
    sampler_devices_per_host     every other process's first local devices that sample (0: it
                                 only trains)
    sampler_devices_by_process   one count per process, replacing both where hosts differ,
                                 e.g. (2, 0, 4, 4); () = the two above
    sampler_tensor_parallel      devices per sampler replica (tensor parallel within a host);
                                 0 = each process's sampler devices are one replica
    trainer                      data × fsdp × tensor over every device that does not sample

Every process keeps at least one device for the trainer: each takes part in every train step
(the trainer mesh spans all hosts), so a process with no trainer device would leave the SPMD
program without it. Process 0 must sample (its first replica is the pipeline's in-process
engine; every other replica, on any process, is a `pipeline.host_sampler.HostSampler` that
claims groups from process 0's rollout hub).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import jax
import ml_collections
from jax.sharding import Mesh

from agentrl_jax.parallel.mesh import make_mesh
from agentrl_jax.pipeline.multihost import LEADER


@dataclasses.dataclass
class Layout:
    trainer: Mesh  # global: every process holds some of its devices
    samplers: list[Mesh]  # this process's sampler replicas, in order; [] where it has none
    replicas_by_process: tuple[int, ...]  # how many replicas each process runs

    @property
    def needs_hub(self) -> bool:
        """Whether any replica is not the leader's first: then the leader runs a rollout hub."""
        return sum(self.replicas_by_process) > 1

    @property
    def followers_sample(self) -> bool:
        """Whether any process but the leader runs a replica (then the leader sends every
        follower the hub's URL, and every follower takes part in receiving it)."""
        return any(self.replicas_by_process[LEADER + 1:])


def sampler_count(mesh_config: ml_collections.ConfigDict, process: int,
                  process_count: int) -> int:
    """How many of `process`'s own devices sample."""
    by_process = tuple(mesh_config.get("sampler_devices_by_process", ()))
    if by_process:
        if len(by_process) != process_count:
            raise ValueError(f"mesh.sampler_devices_by_process={by_process} names "
                             f"{len(by_process)} processes; the run has {process_count}")
        return int(by_process[process])
    if process == LEADER:
        return int(mesh_config.sampler_devices)
    return int(mesh_config.sampler_devices_per_host)


def replica_size(mesh_config: ml_collections.ConfigDict, count: int) -> int:
    """Devices per replica on a process with `count` sampler devices."""
    return int(mesh_config.get("sampler_tensor_parallel", 0)) or count


def check_counts(mesh_config: ml_collections.ConfigDict) -> None:
    """Refuses counts no device set can satisfy (checked before the processes join)."""
    by_process = tuple(mesh_config.get("sampler_devices_by_process", ()))
    leader = int(by_process[LEADER]) if by_process else int(mesh_config.sampler_devices)
    others = ([int(n) for n in by_process[LEADER + 1:]] if by_process
              else [int(mesh_config.sampler_devices_per_host)])
    if leader < 1 or min(others, default=0) < 0:
        raise ValueError(f"sampler devices: process 0 needs at least one (the pipeline's own "
                         f"sampler), every other 0 or more; got {leader} and {others}")
    if int(mesh_config.get("sampler_tensor_parallel", 0)) < 0:
        raise ValueError("mesh.sampler_tensor_parallel must be 0 (one replica per process) or "
                         "more")


def build_layout(mesh_config: ml_collections.ConfigDict,
                 devices: Sequence[jax.Device] | None = None,
                 process_index: int | None = None) -> Layout:
    """Splits the devices (see the module docstring); raises with what to set when a process
    would keep no trainer device, or its sampler devices do not divide into replicas.

    `devices`: the slice's devices (default `jax.devices()`), e.g. a TPU topology's for an
    ahead-of-time compilation (`agentrl_jax.aot`); `process_index`: whose sampler meshes
    `Layout.samplers` holds (default this process's).
    """
    check_counts(mesh_config)
    devices = list(jax.devices() if devices is None else devices)
    this = jax.process_index() if process_index is None else process_index
    processes = sorted({d.process_index for d in devices})
    sampler_devices: list[jax.Device] = []
    mine: list[Mesh] = []
    replicas = [0] * len(processes)
    for process in processes:
        own = [d for d in devices if d.process_index == process]
        n = sampler_count(mesh_config, process, len(processes))
        if n >= len(own):
            raise ValueError(
                f"process {process} samples on {n} of its {len(own)} devices: it must keep at "
                "least one for the trainer (it takes part in every train step); lower "
                "mesh.sampler_devices (process 0), mesh.sampler_devices_per_host or "
                "mesh.sampler_devices_by_process")
        if not n:
            continue
        size = replica_size(mesh_config, n)
        if n % size:
            raise ValueError(f"process {process}'s {n} sampler devices do not divide into "
                             f"replicas of mesh.sampler_tensor_parallel={size}")
        replicas[process] = n // size
        sampler_devices += own[:n]
        if process == this:
            mine = [make_mesh(data=1, fsdp=1, tensor=size, devices=own[i:i + size])
                    for i in range(0, n, size)]
    trainer_devices = [d for d in devices if d not in sampler_devices]
    t = mesh_config.trainer
    trainer = make_mesh(data=t.data, fsdp=t.fsdp, tensor=t.tensor, devices=trainer_devices)
    return Layout(trainer=trainer, samplers=mine, replicas_by_process=tuple(replicas))
