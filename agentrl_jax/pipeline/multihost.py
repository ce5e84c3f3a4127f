"""Multi-host RL: one rollout leader, every process a trainer (SPMD).

Layout. `jax.distributed` joins N processes. Process 0 is the *leader*: it talks to the
controller, runs the rollout workers and the sampling engine on the first few of its own local
devices (the sampler mesh, process-local), and drives the pipeline (`pipeline.runner`). Every
other device of every process, process 0's remaining ones included, forms one global trainer
mesh; every process holds its shards of the parameters and optimizer state and calls the same
jitted train step on it (single program, multiple data). So the leader must keep at least one
device for training (it takes part in every trainer computation), and the sampler never shares
a device with the trainer (two programs with collectives on the same devices could be queued in
different orders on different devices, which deadlocks).

Protocol. The leader is the only process that knows what happens next, so before each
computation on the trainer mesh it *announces* it to the followers, which run a loop that
receives one message and performs the same call:

    step     the packed micro-batches and the global loss-token count → `trainer.step`
    gather   → the parameters are all-gathered and copied to the host (leader: kept, to become
               the sampler's weights or the exported model; followers: dropped)
    save     a step and the pipeline's bookkeeping → the Orbax checkpoint save, which Orbax
               requires of every process (each writes its own shards; process 0 the JSON)
    finish   → followers leave the loop (then wait for pending saves, as the leader does)
    done     → followers exit: the leader has finished evaluating and exporting

Every process issues the same sequence of trainer-mesh computations in the same order, which is
all SPMD needs. A message is one broadcast over the trainer devices (`Channel`): its size first
(a fixed-shape int32), then its bytes in chunks of a few fixed sizes (so a varying batch size
compiles nothing new), each chunk a sum over a [devices, chunk] array in which only the
leader's row is non-zero. Messages are `np.savez` archives (a JSON header and plain arrays),
never pickles.

Weight sync. After each step the leader needs the new parameters on its sampler mesh, which
lies outside the trainer mesh; a device transfer between them would have to cross processes.
Instead every process joins an all-gather of the parameters onto each trainer device and the
leader copies the result to host memory; the engine then places it onto the sampler mesh
(`jax.device_put`). Stacked layer parameters are gathered one layer at a time, so a device
never holds more than one layer's full matrices beyond its own shards. The leader's host holds a
full copy of the parameters (fp32: 4 bytes per parameter).

Followers block inside the broadcast collective while the leader collects rollouts; on TPU that
wait has no timeout. On CPU (tests) Gloo collectives time out after its default (30 min). If a
process dies, `jax.distributed`'s heartbeats end the others (100 s by default); rerunning the
same command on every host resumes from the last checkpoint (`experiment.rl_stage`).
"""

from __future__ import annotations

import dataclasses
import io
import json
import logging
import os
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from agentrl_jax.checkpoint import CheckpointManager
from agentrl_jax.models.decoder import Decoder
from agentrl_jax.rl.batch import TrainBatch
from agentrl_jax.rl.train_step import Trainer, TrainState

log = logging.getLogger(__name__)

LEADER = 0  # the process that samples and drives the pipeline


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
) -> None:
    """Joins the processes of a run; must come before any JAX computation.

    Explicit arguments (any of them) initialise with those (the rest from JAX's cluster
    detection or environment). Without them: on a Cloud TPU VM, `jax.distributed.initialize()`
    detects the pod itself (one host is a pod of one); elsewhere the run is one process and
    nothing is initialised.
    """
    if coordinator_address or num_processes is not None or process_id is not None:
        jax.distributed.initialize(coordinator_address=coordinator_address,
                                   num_processes=num_processes, process_id=process_id)
    elif on_cloud_tpu_vm():
        jax.distributed.initialize()
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
    np.savez(buffer, __header__=np.frombuffer(header, np.uint8), **message.arrays)
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
    return [TrainBatch(**{name: arrays.get(f"{i}.{name}") for name in _BATCH_FIELDS})
            for i in range(count)]


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


# ----------------------------------------------------------------------------- gathering


class ParamGather:
    """All-gathers sharded arrays to host memory, stacked layers one layer at a time."""

    def __init__(self):
        self._whole: dict[Any, Callable] = {}
        self._layer: dict[Any, Callable] = {}

    def _fns(self, x: jax.Array) -> tuple[Callable, Callable]:
        key = x.sharding
        if key not in self._whole:
            replicated = NamedSharding(x.sharding.mesh, PartitionSpec())
            self._whole[key] = jax.jit(lambda a: a, out_shardings=replicated)
            self._layer[key] = jax.jit(
                lambda a, i: jax.lax.dynamic_index_in_dim(a, i, keepdims=False),
                out_shardings=replicated)
        return self._whole[key], self._layer[key]

    def __call__(self, tree: Any, keep: bool) -> Any:
        """`tree`'s arrays as numpy on this process when `keep`, else None (still gathering:
        every process must take part)."""

        def one(x: jax.Array) -> np.ndarray | None:
            whole, layer = self._fns(x)
            if x.ndim >= 3:  # [layers, ...]: one layer's full matrix at a time
                parts = [layer(x, np.int32(i)) for i in range(x.shape[0])]
                if not keep:
                    jax.block_until_ready(parts)
                    return None
                return np.stack([np.asarray(p.addressable_data(0)) for p in parts])
            out = whole(x)
            if not keep:
                jax.block_until_ready(out)
                return None
            return np.asarray(out.addressable_data(0))

        return jax.tree.map(one, tree)


# ----------------------------------------------------------------------------- the leader


class LeaderTrainer:
    """The leader's `Trainer`: each step is announced first, so every follower makes it too.

    Everything else is the wrapped trainer's (the pipeline reads `config` and `mesh`).
    """

    def __init__(self, trainer: Trainer, channel: Channel):
        self._trainer = trainer
        self._channel = channel

    def __getattr__(self, name: str) -> Any:
        return getattr(self._trainer, name)

    def step(self, state: TrainState, micro_batches: list[TrainBatch],
             num_loss_tokens: float) -> tuple[TrainState, dict[str, float]]:
        self._channel.send("step", {"count": len(micro_batches),
                                    "num_loss_tokens": float(num_loss_tokens)},
                           batch_arrays(micro_batches))
        return self._trainer.step(state, micro_batches, num_loss_tokens)


class Leader:
    """What the leader adds to an RL run: announcing steps, gathers, saves and the end."""

    def __init__(self, channel: Channel):
        if not channel.is_leader:
            raise ValueError("Leader on a follower process")
        self.channel = channel
        self._gather = ParamGather()

    def wrap(self, trainer: Trainer) -> LeaderTrainer:
        return LeaderTrainer(trainer, self.channel)

    def gather(self, params: Any) -> Any:
        """The full parameters as host arrays (every process takes part)."""
        self.channel.send("gather")
        return self._gather(params, keep=True)

    def sampler_weights(self, trainer: Trainer) -> Callable[[TrainState], Any]:
        """For `RLPipeline(weights_fn=...)`: a state's parameters in the sampler's layout."""
        from agentrl_jax.sampling.weights import weights_of

        if trainer.lora is not None:  # the adapters alone: the samplers keep the base
            return lambda state: self.gather(state.params)
        return lambda state: weights_of(trainer.model(self.gather(state.params)))

    def save(self, ckpt: CheckpointManager, step: int, state: TrainState, *,
             bookkeeping: dict[str, Any], force: bool = True) -> bool:
        """`ckpt.save`, made by every process (each writes its own shards)."""
        self.channel.send("save", {"step": int(step), "bookkeeping": bookkeeping,
                                   "force": force})
        return ckpt.save(step, state, bookkeeping=bookkeeping, force=force)

    def finish(self, state: TrainState) -> Any:
        """Ends the followers' loop; returns the final parameters as host arrays."""
        params = self.gather(state.params)
        self.channel.send("finish")
        return params

    def done(self) -> None:
        """Lets the followers exit (after evaluation and export, which need only the leader)."""
        self.channel.send("done")


# ----------------------------------------------------------------------------- followers


def follow(channel: Channel, trainer: Trainer, state: TrainState,
           ckpt: CheckpointManager | None) -> TrainState:
    """A follower's loop: performs what the leader announces until it says `finish`."""
    gather = ParamGather()
    while True:
        message = channel.receive()
        if message.kind == "step":
            batches = batches_from(message.arrays, message.meta["count"])
            state, _ = trainer.step(state, batches, message.meta["num_loss_tokens"])
        elif message.kind == "gather":
            gather(state.params, keep=False)
        elif message.kind == "save":
            if ckpt is None:
                raise RuntimeError("the leader saves a checkpoint; this follower has none")
            ckpt.save(message.meta["step"], state, bookkeeping=message.meta["bookkeeping"],
                      force=message.meta["force"])
        elif message.kind == "finish":
            return state
        else:
            raise RuntimeError(f"unexpected message {message.kind!r} from the leader")


def follow_rl(
    config: ml_collections.ConfigDict,
    *,
    model: Decoder,
    trainer_mesh: Mesh,
    checkpoint_dir: str,
    channel: Channel,
    reference: Decoder | None = None,
) -> TrainState:
    """A follower's side of `experiment.rl_stage.run_rl`, which the leader runs.

    It makes the same trainer-mesh calls in the same order: build the trainer, initialise the
    state, restore the latest checkpoint, then follow; at the end wait for pending saves.
    """
    trainer = Trainer(model, config.trainer, trainer_mesh, reference=reference)
    state = trainer.init_state(config.pipeline.seed)
    with CheckpointManager(checkpoint_dir, max_to_keep=config.checkpoint.keep) as ckpt:
        if ckpt.latest_step() is not None:
            state, _ = ckpt.restore(state)
        state = follow(channel, trainer, state, ckpt)
        ckpt.wait_until_finished()
    return state


def wait_for_leader(channel: Channel) -> None:
    """A follower's last call: returns when the leader says `done`."""
    message = channel.receive()
    if message.kind != "done":
        raise RuntimeError(f"expected 'done' from the leader, got {message.kind!r}")
