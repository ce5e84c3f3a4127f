"""Multi-host transport: joining the processes, and the leader's messages to the followers.

Layout. `jax.distributed` joins N processes. Process 0 is the *leader*: it talks to the
controller, runs the pipeline (`pipeline.runner`) and alone decides what the trainer does next
(steps, checkpoints, the task stream's order). Every process holds shards of one global trainer
mesh and calls the same jitted computations on it (single program, multiple data); how they are
driven is `pipeline.trainer_driver.MultiHostDriver`, which sends its announcements through the
`Channel` here. The sampler never shares a device with the trainer (two programs with
collectives on the same devices could be queued in different orders on different devices,
which deadlocks), and the leader keeps at least one trainer device (it takes part in every
trainer computation).

A message is one broadcast over the trainer devices (`Channel`): its size first (a fixed-shape
int32), then its bytes in chunks of a few fixed sizes (so a varying batch size compiles nothing
new), each chunk a sum over a [devices, chunk] array in which only the leader's row is non-zero.
Only trainer devices take part, so a broadcast never waits behind the sampler's work. Messages
are `np.savez` archives (a JSON header and plain arrays), never pickles.

Faults. Followers block inside the broadcast collective while the leader collects rollouts;
on TPU that wait has no timeout of its own. `initialize` sets the coordination service's
heartbeat timeout (`HEARTBEAT_TIMEOUT_S`), after which the processes that remain learn of a
dead peer and end; rerunning the same command on every host resumes from the last checkpoint
(`experiment.rl_stage`).
"""

from __future__ import annotations

import dataclasses
import io
import json
import logging
import os
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from agentrl_jax.rl.batch import TrainBatch

log = logging.getLogger(__name__)

LEADER = 0  # the process that drives the pipeline and the trainer
HEARTBEAT_TIMEOUT_S = 100  # a process silent this long is dead: the others end (JAX's default)


# ----------------------------------------------------------------------------- start-up


def on_cloud_tpu_vm() -> bool:
    """Whether this is a Cloud TPU VM, where `jax.distributed.initialize()` finds its peers."""
    try:
        from jax._src.cloud_tpu_init import running_in_cloud_tpu_vm

        return bool(running_in_cloud_tpu_vm)
    except ImportError:  # private module moved: fall back on the TPU device files
        return os.path.exists("/dev/accel0") or os.path.exists("/dev/vfio/0")


def initialize(
    coordinator_address: str | None = None,
    num_processes: int | None = None,
    process_id: int | None = None,
    heartbeat_timeout_s: int = HEARTBEAT_TIMEOUT_S,
) -> None:
    """Joins the processes of a run; must come before any JAX computation.

    `heartbeat_timeout_s` bounds how long the others run on after one process died.

    Explicit arguments (any of them) initialise with those (the rest from JAX's cluster
    detection or environment). Without them: on a Cloud TPU VM, `jax.distributed.initialize()`
    detects the pod itself (one host is a pod of one); elsewhere the run is one process and
    nothing is initialised.
    """
    if coordinator_address or num_processes is not None or process_id is not None:
        jax.distributed.initialize(coordinator_address=coordinator_address,
                                   num_processes=num_processes, process_id=process_id,
                                   heartbeat_timeout_seconds=heartbeat_timeout_s)
    elif on_cloud_tpu_vm():
        jax.distributed.initialize(heartbeat_timeout_seconds=heartbeat_timeout_s)
    else:
        return
    log.info("process %d of %d; %d local devices of %d", jax.process_index(),
             jax.process_count(), jax.local_device_count(), jax.device_count())


def is_leader() -> bool:
    return jax.process_index() == LEADER


# ----------------------------------------------------------------------------- messages


@dataclasses.dataclass
class Message:
    kind: str
    meta: dict[str, Any]
    arrays: dict[str, np.ndarray]


def encode(message: Message) -> np.ndarray:
    """A message as uint8 bytes (an `np.savez` archive; no pickle)."""
    header = json.dumps({"kind": message.kind, "meta": message.meta}).encode()
    buffer = io.BytesIO()
    arrays: dict[str, Any] = {"__header__": np.frombuffer(header, np.uint8), **message.arrays}
    np.savez(buffer, **arrays)
    return np.frombuffer(buffer.getvalue(), np.uint8)


def decode(data: np.ndarray) -> Message:
    with np.load(io.BytesIO(data.tobytes()), allow_pickle=False) as archive:
        header = json.loads(archive["__header__"].tobytes())
        arrays = {name: archive[name] for name in archive.files if name != "__header__"}
    return Message(header["kind"], header["meta"], arrays)


_BATCH_FIELDS = [f.name for f in dataclasses.fields(TrainBatch)]


def batch_arrays(micro_batches: Sequence[TrainBatch]) -> dict[str, np.ndarray]:
    """The micro-batches as named host arrays ("3.tokens"); absent optional fields omitted."""
    arrays = {}
    for i, mb in enumerate(micro_batches):
        for name in _BATCH_FIELDS:
            value = getattr(mb, name)
            if value is not None:
                arrays[f"{i}.{name}"] = np.asarray(value)
    return arrays


def batches_from(arrays: dict[str, np.ndarray], count: int) -> list[TrainBatch]:
    fields: list[dict[str, Any]] = [
        {name: arrays.get(f"{i}.{name}") for name in _BATCH_FIELDS} for i in range(count)]
    return [TrainBatch(**f) for f in fields]


class Channel:
    """Leader → followers messages, broadcast over the trainer devices.

    Only trainer devices take part, so a broadcast never waits behind the sampler's work.
    Every process must hold at least one of `devices`, and the leader must.
    """

    MIN_CHUNK = 1 << 16
    MAX_CHUNK = 1 << 24

    def __init__(self, devices: Sequence[jax.Device]):
        self.devices = list(devices)
        holders = {d.process_index for d in self.devices}
        if holders != set(range(jax.process_count())):
            raise ValueError(f"processes {sorted(set(range(jax.process_count())) - holders)} "
                             "hold no trainer device")
        mesh = Mesh(np.asarray(self.devices, dtype=object), ("devices",))
        self._rows = NamedSharding(mesh, PartitionSpec("devices"))
        self._source_row = next(i for i, d in enumerate(self.devices)
                                if d.process_index == LEADER)
        self.is_leader = is_leader()
        self._sum = jax.jit(lambda x: jnp.sum(x, axis=0, dtype=x.dtype),
                            out_shardings=NamedSharding(mesh, PartitionSpec()))

    def _broadcast(self, value: np.ndarray) -> np.ndarray:
        """The leader's `value` on every process (the others pass any array of its shape)."""
        value = np.ascontiguousarray(value)
        zeros = np.zeros((1, *value.shape), value.dtype)

        def row(index) -> np.ndarray:
            source = self.is_leader and (index[0].start or 0) == self._source_row
            return value[None] if source else zeros

        stacked = jax.make_array_from_callback((len(self.devices), *value.shape), self._rows, row)
        return np.asarray(self._sum(stacked).addressable_data(0))

    @classmethod
    def _chunks(cls, total: int) -> list[int]:
        """Chunk sizes for `total` bytes: powers of two from MIN_CHUNK to MAX_CHUNK."""
        sizes = []
        while total > 0:
            size = min(cls.MAX_CHUNK, max(cls.MIN_CHUNK, 1 << (total - 1).bit_length()))
            sizes.append(size)
            total -= size
        return sizes

    def _transfer(self, data: np.ndarray | None) -> np.ndarray:
        length = np.asarray([0 if data is None else data.size], np.int32)
        if data is not None and data.size >= 2 ** 31:
            raise ValueError(f"a message of {data.size} bytes is too large")
        total = int(self._broadcast(length)[0])
        parts, offset = [], 0
        for size in self._chunks(total):
            chunk = np.zeros(size, np.uint8)
            if data is not None:
                piece = data[offset: offset + size]
                chunk[: piece.size] = piece
            parts.append(self._broadcast(chunk)[: min(size, total - offset)])
            offset += size
        return np.concatenate(parts) if parts else np.zeros(0, np.uint8)

    def send(self, kind: str, meta: dict[str, Any] | None = None,
             arrays: dict[str, np.ndarray] | None = None) -> None:
        if not self.is_leader:
            raise RuntimeError("only the leader sends")
        self._transfer(encode(Message(kind, meta or {}, arrays or {})))

    def receive(self) -> Message:
        if self.is_leader:
            raise RuntimeError("the leader does not receive")
        return decode(self._transfer(None))
