"""One trainer driver for one host and for many: what the RL pipeline asks of the trainer.

The pipeline (`pipeline.runner`) and the RL stage (`experiment.rl_stage`) see a `TrainerDriver`:

    step(state, micro_batches, num_loss_tokens)   one optimizer step
    weights(state)                                 the sampler's weights of `state`
    save(step, state, bookkeeping=...)             a checkpoint
    finish(state)                                  the final parameters, as host arrays
                                                   (with LoRA, `model` of them is then
                                                   host-resident too)

plus the trainer's `config`, `mesh`, `lora` and `model(params)`, which the pipeline reads.

`LocalDriver` runs them on this process. `MultiHostDriver` runs them on every process of a
`jax.distributed` run (SPMD: each holds its shards of the state and must make the same
trainer-mesh calls in the same order). On the leader (process 0), each method first announces
itself over a `multihost.Channel` and then performs its part; the followers run `serve`, which
receives the announcements and performs the *same* method bodies (`_do_step`, `_do_weights`,
`_do_save`), so the two sides share one code path and cannot drift apart.

`open_training` builds the trainer, initialises the state and restores the latest checkpoint: the
one set-up sequence every process runs, leader, follower or single host.

Weight gathering (`ParamGather`): the parameters are all-gathered over the trainer mesh, stacked
layer parameters one layer at a time, so a device never holds more than one layer's full
matrices beyond its own shards. Each gathered piece is then handed to a `place` function:
`host` copies it to host memory (the fallback, and the form a checkpoint export or an
out-of-process sampler needs), while a sampler on this process's own chips takes it device to
device (`sampling.weights` shardings, `jax.device_put` between local devices), so no full copy
passes through host memory.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
from collections.abc import Callable, Iterator
from typing import Any

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from agentrl_jax import precision, stage_clock
from agentrl_jax.checkpoint import CheckpointManager
from agentrl_jax.dataclass_config import mutable_copy
from agentrl_jax.models.decoder import Decoder
from agentrl_jax.pipeline import multihost
from agentrl_jax.pipeline.weight_sync import (
    PlacedWeights,
    replica_of,
    snapshot,
    stacked,
)
from agentrl_jax.rl.batch import TrainBatch
from agentrl_jax.rl.train_step import Trainer, TrainState
from agentrl_jax.sampling.weights import Weights, weights_of
from agentrl_jax.tree_digest import layered_digest

log = logging.getLogger(__name__)

# (gathered array on one of this process's trainer devices, its leaf's key path in the tree,
#  its layer index or None for an unstacked leaf) -> what the caller keeps of it
Place = Callable[[jax.Array, tuple, "int | None"], Any]


def host(piece: jax.Array, path: tuple = (), layer: int | None = None) -> np.ndarray:
    """The host-memory `Place`: a numpy copy."""
    return np.asarray(piece)


def onto(shardings: Any) -> Place:
    """The device-to-device `Place`: each piece onto its leaf's sharding in `shardings` (a tree
    like the gathered one; a stacked leaf's sharding with its layer axis dropped per layer),
    for a sampler on this process's own devices."""
    flat = dict(jax.tree_util.tree_flatten_with_path(shardings)[0])

    def place(piece: jax.Array, path: tuple, layer: int | None) -> jax.Array:
        target = flat[path]
        if layer is not None:
            target = NamedSharding(target.mesh, PartitionSpec(*tuple(target.spec)[1:]))
        return jax.device_put(piece, target)

    return place


def onto_each(shardings: list[Any]) -> Place:
    """`onto` for several samplers on this process's devices: each piece becomes a tuple, one
    placed copy per replica (`replica_of` takes one replica's tree back out)."""
    places = [onto(s) for s in shardings]

    def place(piece: jax.Array, path: tuple, layer: int | None) -> tuple[jax.Array, ...]:
        return tuple(p(piece, path, layer) for p in places)

    return place


# ----------------------------------------------------------------------------- set-up


@dataclasses.dataclass
class Training:
    """What `open_training` hands out: the trainer, its (restored) state and the checkpoints."""

    trainer: Trainer
    state: TrainState
    checkpoints: CheckpointManager
    start: int | None  # the restored step (None: a fresh run)
    bookkeeping: dict[str, Any] | None  # the pipeline's part of the restored checkpoint


def trainer_config(config: ml_collections.ConfigDict) -> ml_collections.ConfigDict:
    """`config.trainer` with its log-probability temperature set to the sampler's.

    The behaviour log-probs are log softmax(logits / T)(token) at the sampling temperature T
    (`config.sampling.temperature`; a greedy sampler, T = 0, records them at 1), so the trainer
    computes log π_θ at the same T and a ratio π_θ / π_behav starts at 1. An unset
    `trainer.temperature` takes T; one set to anything else is refused, since every ratio would
    then be off before any update, on the policy's own samples.
    """
    sampling = config.get("sampling")
    if sampling is None:
        return config.trainer
    sampled = float(sampling.temperature) or 1.0
    if config.trainer.temperature is None:
        trainer = mutable_copy(config.trainer)
        trainer.temperature = sampled
        return trainer
    if float(config.trainer.temperature) != sampled:
        raise ValueError(
            f"trainer.temperature={config.trainer.temperature} differs from the sampler's "
            f"(sampling.temperature={sampling.temperature}, log-probs at {sampled}): the "
            "importance ratios would compare two distributions; leave trainer.temperature unset")
    return config.trainer


@contextlib.contextmanager
def open_training(
    config: ml_collections.ConfigDict,
    *,
    model: Decoder,
    trainer_mesh: Mesh,
    checkpoint_dir: str | os.PathLike,
    reference: Decoder | None = None,
) -> Iterator[Training]:
    """Builds the trainer of `config.trainer`, initialises its state (`config.pipeline.seed`)
    and restores the latest checkpoint in `checkpoint_dir`; on leaving, waits for pending saves.

    Every process of a run calls this with the same arguments, so they make the same
    trainer-mesh computations in the same order (the LoRA base fingerprint, which checkpoints
    name, is one: it is reduced where the shards are, `tree_digest.tree_fingerprint`).
    """
    trainer = Trainer(model, trainer_config(config), trainer_mesh, reference=reference)
    state = trainer.init_state(config.pipeline.seed)
    with CheckpointManager(checkpoint_dir, max_to_keep=config.checkpoint.keep,
                           keep_period=config.checkpoint.get("keep_period"),
                           base_fingerprint=trainer.base_fingerprint,
                           adapter_config=trainer.adapter_config()) as ckpt:
        start, book = ckpt.latest_step(), None
        if start is not None:
            state, book = ckpt.restore(state)
        yield Training(trainer, state, ckpt, start, book)
        ckpt.wait_until_finished()


# ----------------------------------------------------------------------------- gathering


class ParamGather:
    """All-gathers sharded arrays over their mesh, stacked layers one layer at a time; every
    process holding a shard must take part in each call.

    `dtype`: floating arrays are cast to it before they are gathered (a bf16 sampler's weights:
    half the bytes moved, and no full-precision copy lands beside the sampler's); None keeps
    them as they are."""

    def __init__(self, dtype: Any = None):
        self._dtype = precision.jax_dtype(dtype)
        self._whole: dict[Any, Any] = {}  # jitted: callable, and traceable ahead of time
        self._layer: dict[Any, Any] = {}

    def _cast(self, a: jax.Array) -> jax.Array:
        if self._dtype is None or not jnp.issubdtype(a.dtype, jnp.floating):
            return a
        return a.astype(self._dtype)

    def _fns(self, x: jax.Array) -> tuple[Any, Any]:
        key = x.sharding
        assert isinstance(key, NamedSharding), "trainer arrays are placed on a mesh"
        if key not in self._whole:   # jit traces each dtype apart; `_cast` decides per dtype
            replicated = NamedSharding(key.mesh, PartitionSpec())
            self._whole[key] = jax.jit(self._cast, out_shardings=replicated)
            self._layer[key] = jax.jit(
                lambda a, i: self._cast(jax.lax.dynamic_index_in_dim(a, i, keepdims=False)),
                out_shardings=replicated)
        return self._whole[key], self._layer[key]

    def __call__(self, tree: Any, place: Place | None = host) -> Any:
        """`tree` with each leaf gathered; a stacked leaf ([layers, ...], ndim >= 3) becomes the
        list of its placed layers, any other leaf its placed whole. `place=None`: gather and
        keep nothing (a process whose result nobody needs still takes part)."""

        def one(path: tuple, x: jax.Array) -> Any:
            whole, layer = self._fns(x)
            if x.ndim >= 3:
                out = []
                for i in range(x.shape[0]):
                    part = layer(x, np.int32(i))
                    if place is None:
                        jax.block_until_ready(part)
                    else:
                        out.append(place(part.addressable_data(0), path, i))
                    del part  # one layer's full matrices at a time
                return None if place is None else out
            out = whole(x)
            if place is None:
                jax.block_until_ready(out)
                return None
            return place(out.addressable_data(0), path, None)

        return jax.tree_util.tree_map_with_path(one, tree)

    def trace(self, tree: Any) -> dict[str, jax.stages.Traced]:
        """The programs `__call__` runs on `tree` (arrays or `jax.ShapeDtypeStruct`s on their
        shardings), traced: one per distinct leaf, named by its first leaf's path (a stacked
        leaf's program gathers one layer)."""
        out: dict[str, jax.stages.Traced] = {}
        seen: set[tuple] = set()
        for path, x in jax.tree_util.tree_flatten_with_path(tree)[0]:
            key = (x.shape, x.dtype, x.sharding)
            if key in seen:
                continue
            seen.add(key)
            whole, layer = self._fns(x)
            name = jax.tree_util.keystr(path, simple=True, separator=".")
            out[name] = (layer.trace(x, jax.ShapeDtypeStruct((), jnp.int32)) if x.ndim >= 3
                         else whole.trace(x))
        return out


# ----------------------------------------------------------------------------- drivers


# (this process's weights of a `weights` call, the weight version) -> None: samplers on this
# process beyond the pipeline's own engine (`pipeline.host_sampler.HostSampler.receive`)
OnWeights = Callable[[Any, "int | None"], None]


class TrainerDriver:
    """The trainer as the pipeline drives it (see the module docstring); this process only.

    `on_weights`: also handed what each `weights` call returns, with its version.
    """

    def __init__(self, training: Training, on_weights: OnWeights | None = None):
        self._trainer = training.trainer
        self._ckpt = training.checkpoints
        self._on_weights = on_weights

    # ---- what the pipeline reads of the trainer -------------------------------------------

    @property
    def config(self) -> ml_collections.ConfigDict:
        return self._trainer.config

    @property
    def mesh(self) -> Mesh:
        return self._trainer.mesh

    @property
    def row_multiple(self) -> int:
        return self._trainer.row_multiple

    @property
    def lora(self) -> Any:
        return self._trainer.lora

    def model(self, params: Any) -> Decoder:
        return self._trainer.model(params)

    # ---- the driver's methods -------------------------------------------------------------

    def step(self, state: TrainState, micro_batches: list[TrainBatch],
             num_loss_tokens: float) -> tuple[TrainState, dict[str, float]]:
        """One optimizer step; `state` is consumed (donated)."""
        return self._do_step(state, micro_batches, num_loss_tokens)

    def weights(self, state: TrainState, version: int | None = None) -> Weights:
        """What the samplers serve of `state` (as weight `version`): sampler-layout weights,
        with LoRA the adapters; independent of `state`'s buffers, which the next step donates."""
        return self._handed_on(snapshot(self._trainer, state), version)

    def _handed_on(self, weights: Any, version: int | None) -> Any:
        if self._on_weights is not None:
            self._on_weights(weights, version)
        return weights

    def save(self, step: int, state: TrainState, *, bookkeeping: dict[str, Any]) -> None:
        """Starts an asynchronous checkpoint save of `state` at `step`."""
        self._do_save(step, state, bookkeeping)

    def finish(self, state: TrainState) -> Any:
        """The final parameters as host arrays (trainable tree: with LoRA, the adapters)."""
        with stage_clock.span("transfer"):
            return jax.device_get(state.params)

    def done(self) -> None:
        """Called once the run's work on this process is over (evaluation, export)."""

    # ---- the bodies every process runs ----------------------------------------------------

    def _do_step(self, state, micro_batches, num_loss_tokens):
        return self._trainer.step(state, micro_batches, num_loss_tokens)

    def _do_save(self, step: int, state: TrainState, bookkeeping: dict[str, Any]) -> None:
        with stage_clock.span("checkpoint"):
            self._ckpt.save(step, state, bookkeeping=bookkeeping, force=True)


LocalDriver = TrainerDriver  # one process: the base class is the local implementation


class MultiHostDriver(TrainerDriver):
    """Every process's driver in a `jax.distributed` run: the leader announces, all perform.

    `place`: where this process keeps the gathered weights of `weights` (default `host`; a
    process with sampler chips of its own passes a device placement). `sampler_dtype`: the
    samplers' weight dtype (`EngineConfig.compute_dtype`), which the full weights are cast to
    before they are gathered for them. Followers call `serve` (whose `on_weights` is theirs;
    the constructor's is the leader's).
    """

    def __init__(self, training: Training, channel: multihost.Channel,
                 place: Place | None = None, on_weights: OnWeights | None = None,
                 sampler_dtype: str | None = None):
        super().__init__(training, on_weights)
        self._channel = channel
        self._gather = ParamGather()
        self._to_samplers = ParamGather(sampler_dtype)
        self._place = place
        self.is_leader = channel.is_leader
        self._host_base: Any = None  # LoRA: the leader's host copy of the base, from `finish`

    def step(self, state, micro_batches, num_loss_tokens):
        self._announce("step", {"count": len(micro_batches),
                                "num_loss_tokens": float(num_loss_tokens)},
                       multihost.batch_arrays(micro_batches))
        return self._do_step(state, micro_batches, num_loss_tokens)

    def weights(self, state: TrainState, version: int | None = None) -> Any:
        """The gathered weights in this process's `place`: host arrays (default), or with an
        `onto_each` placement over the leader's replicas, the first one's copy as
        `PlacedWeights` (the pipeline's engine) while `on_weights` receives every copy;
        `version` travels to the followers' `on_weights`."""
        self._announce("weights", {"version": version})
        gathered = self._handed_on(self._do_weights(state, keep=True), version)
        if self._place in (None, host) or self.lora is not None:
            return gathered
        first = replica_of(gathered, 0)
        return PlacedWeights(first, layered_digest(first))

    def save(self, step, state, *, bookkeeping):
        self._announce("save", {"step": int(step), "bookkeeping": bookkeeping})
        self._do_save(step, state, bookkeeping)

    def finish(self, state: TrainState) -> Any:
        """Ends the followers' `serve`; returns the final parameters on the leader's host."""
        self._announce("finish")
        params = self._gather(state.params, host)
        if self.lora is not None:  # the adapters' export needs their base on this host too
            self._host_base = stacked(self._gather(self._trainer.frozen_params, host))
        return stacked(params)

    def model(self, params: Any) -> Decoder:
        """As `TrainerDriver.model`; after `finish`, with LoRA, over the leader's host copy of
        the base (the trainer's own spans every process's devices, which no one process can
        read for evaluation or export)."""
        return self._trainer.model(params, self._host_base)

    def done(self) -> None:
        """Lets the followers return (after evaluation and export, which need only the leader)."""
        self._announce("done")

    # ---- followers ------------------------------------------------------------------------

    def serve(self, state: TrainState,
              on_weights: OnWeights | None = None) -> TrainState:
        """A follower's loop: performs what the leader announces, until `finish` (after which
        it gathers the final parameters with the leader) and then `done`.

        `on_weights(placed, version)` receives this process's gathered weights of each
        `weights` call and the weight version the leader named (a sampler on this process's
        chips); without it the gather keeps nothing.
        """
        while True:
            message = self._channel.receive()
            if message.kind == "step":
                batches = multihost.batches_from(message.arrays, message.meta["count"])
                state, _ = self._do_step(state, batches, message.meta["num_loss_tokens"])
            elif message.kind == "weights":
                placed = self._do_weights(state, keep=on_weights is not None)
                if on_weights is not None:
                    on_weights(placed, message.meta.get("version"))
            elif message.kind == "save":
                self._do_save(message.meta["step"], state, message.meta["bookkeeping"])
            elif message.kind == "finish":
                self._gather(state.params, None)
                if self.lora is not None:
                    self._gather(self._trainer.frozen_params, None)
                break
            else:
                raise RuntimeError(f"unexpected message {message.kind!r} from the leader")
        self._ckpt.wait_until_finished()
        message = self._channel.receive()
        if message.kind != "done":
            raise RuntimeError(f"expected 'done' from the leader, got {message.kind!r}")
        return state

    # ---- the bodies ----------------------------------------------------------------------

    def _announce(self, kind: str, meta: dict[str, Any] | None = None,
                  arrays: dict[str, np.ndarray] | None = None) -> None:
        if not self.is_leader:
            raise RuntimeError(f"{kind}: only the leader drives the trainer")
        self._channel.send(kind, meta, arrays)

    def _do_weights(self, state: TrainState, keep: bool) -> Any:
        place = (self._place or host) if keep else None
        if self.lora is not None:  # the adapters alone: the samplers keep the base
            gathered = self._gather(state.params, place)
        else:
            gathered = self._to_samplers(weights_of(self._trainer.model(state.params)), place)
        if place is host:
            return stacked(gathered)
        return gathered
