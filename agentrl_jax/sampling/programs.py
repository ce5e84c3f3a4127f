"""The sampling engine's device programs over one mesh: their shardings, their bucket shapes,
and the arrays each call takes.

`SamplingEngine` runs them on real weights; an ahead-of-time compilation (`agentrl_jax.aot`)
traces and compiles the same programs, with the same shardings, on abstract arrays for a
device it does not have. Both enumerate the calls a warmed-up engine compiles through
`calls`, and both build a call's arrays through `prefill_arrays` / `decode_arrays`, so the
two cannot drift apart.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from agentrl_jax import precision
from agentrl_jax.models.config import ModelConfig
from agentrl_jax.parallel import sharding as sharding_lib
from agentrl_jax.sampling.constraint import bitmask_words
from agentrl_jax.sampling.forward import POOL_AXES, KVPool
from agentrl_jax.sampling.steps import RowParams, compile_steps
from agentrl_jax.sampling.weights import cast_floating, split_layers, split_shardings


@dataclasses.dataclass(frozen=True)
class Call:
    """One compiled shape: a prefill of `rows` × `length` new tokens over a context of
    `width` pages (0: fresh prompts), or a decode of `rows` over `width` pages (`length` is
    then the steps per call); `masked`: the constrained (token-bitmask) variant."""

    kind: str  # "prefill" | "decode"
    rows: int
    length: int
    width: int
    masked: bool = False

    @property
    def name(self) -> str:
        shape = (f"prefill_{self.rows}x{self.length}" if self.kind == "prefill"
                 else f"decode_{self.rows}x{self.length}step")
        return f"{shape}_ctx{self.width}p" + ("_masked" if self.masked else "")


class SamplerPrograms:
    """The jitted prefill and decode programs of an engine of `config` (an `EngineConfig`)
    for a model of shape `cfg`, with weights on `weight_shardings` over `mesh` (None: one
    device).

    With `config.compute_dtype` set, `cfg` is the model's with that compute dtype (`self.cfg`),
    and the weights and the KV pool are kept in it: `layout` casts the weights once as they are
    installed, rather than every call casting them."""

    def __init__(self, cfg: ModelConfig, config: Any, mesh: Mesh | None,
                 weight_shardings: Any, rules: sharding_lib.Rules = sharding_lib.DEFAULT_RULES):
        self.weights_dtype = precision.jax_dtype(getattr(config, "compute_dtype", None))
        if self.weights_dtype is not None:
            cfg = cfg.replace(dtype=self.weights_dtype)
        self.cfg, self.config, self.mesh = cfg, config, mesh
        self.weight_shardings = weight_shardings
        self.split_shardings = split_shardings(weight_shardings, cfg.num_layers)
        # `Weights` (any dtype) -> the programs' `SamplerWeights`, on their shardings.
        self.layout = jax.jit(functools.partial(split_layers, dtype=self.weights_dtype),
                              out_shardings=self.split_shardings)
        self._cast = jax.jit(functools.partial(cast_floating, dtype=self.weights_dtype),
                             out_shardings=self.split_shardings)
        self.pool_sharding = self.replicated = None
        pool = self.abstract_pool()
        if mesh is not None:
            spec = sharding_lib.logical_to_spec(POOL_AXES, rules, mesh, pool.k.shape)
            self.pool_sharding = NamedSharding(mesh, spec)
            self.replicated = NamedSharding(mesh, PartitionSpec())
        self.prefill, self.decode = compile_steps(cfg, config.page_size, config.steps_per_sync,
                                                  self.pool_sharding)
        # Constrained turns decode one step a call (their next mask needs the token drawn).
        self.decode_one = self.decode if config.steps_per_sync == 1 else compile_steps(
            cfg, config.page_size, 1, self.pool_sharding)[1]
        self.mask_words = bitmask_words(cfg.vocab_size)

    def num_compiled(self) -> int:
        """Compiled variants of the programs so far."""
        one = self.decode_one.num_compiled() if self.decode_one is not self.decode else 0
        return self.prefill._cache_size() + self.decode.num_compiled() + one

    # ---- state -----------------------------------------------------------------------------

    def new_pool(self) -> KVPool:
        """The KV pool, zeroed, on the pool's sharding."""
        pool = KVPool.zeros(self.cfg, self.config.num_pages * self.config.page_size,
                            self.config.page_size)
        return pool if self.pool_sharding is None else jax.device_put(pool, self.pool_sharding)

    def abstract_pool(self) -> KVPool:
        """The pool's shapes (on its sharding once known), allocating nothing."""
        pool = jax.eval_shape(lambda: KVPool.zeros(
            self.cfg, self.config.num_pages * self.config.page_size, self.config.page_size))
        return sharding_lib.abstract_on(pool, self.pool_sharding)

    def abstract_weights(self, weights: Any) -> Any:
        """Sampler-layout weights (`split_layers`) of `weights` (a `weights_of` tree, abstract
        or not) as shapes on the split shardings: what every program takes."""
        return sharding_lib.abstract_on(
            jax.eval_shape(functools.partial(split_layers, dtype=self.weights_dtype), weights),
            self.split_shardings)

    def in_compute_dtype(self, weights: Any) -> Any:
        """Sampler-layout weights placed elsewhere (a trainer's `PlacedWeights`) in the
        programs' weight dtype: cast on their devices when they arrive in another."""
        if self.weights_dtype is None or jax.tree.leaves(weights)[0].dtype == self.weights_dtype:
            return weights
        return self._cast(weights)

    # ---- calls -----------------------------------------------------------------------------

    def calls(self, constrained: bool = False) -> list[Call]:
        """Every shape a warmed-up engine has compiled (`SamplingEngine.warmup`); with
        `constrained`, the masked variants too."""
        page = self.config.page_size
        prefill_buckets, context_buckets, batch_buckets = self.config.sorted_buckets()
        out = []
        for rows in self.config.prefill_rows():
            for t in prefill_buckets:
                if not self.config.prefill_call_fits(rows, t):
                    continue
                for c in (0, *context_buckets):
                    for masked in sorted({False, constrained}):
                        out.append(Call("prefill", rows, t, c // page, masked))
        for b in batch_buckets:
            for c in context_buckets:
                for masked in sorted({False, constrained}):
                    steps = 1 if masked else self.config.steps_per_sync
                    out.append(Call("decode", b, steps, c // page, masked))
        return out

    def row_arrays(self, rows: int) -> dict[str, np.ndarray]:
        """Per-row sampling parameters at their defaults (`RowParams`' fields)."""
        return dict(temperature=np.ones(rows, np.float32), top_k=np.zeros(rows, np.int32),
                    top_p=np.ones(rows, np.float32), seed=np.zeros(rows, np.uint32),
                    stop_ids=np.full((rows, self.config.max_stop_ids), -1, np.int32))

    def prefill_arrays(self, rows: int, bucket: int, width: int, masked: bool
                       ) -> dict[str, Any]:
        """A prefill call's arrays (`steps.prefill`'s arguments after the pool), empty rows."""
        return dict(tokens=np.zeros((rows, bucket), np.int32), start=np.zeros(rows, np.int32),
                    length=np.zeros(rows, np.int32), write=np.zeros((rows, bucket), np.int32),
                    table=np.zeros((rows, width), np.int32) if width else None,
                    bitmask=self._bitmask(rows, masked))

    def decode_arrays(self, rows: int, width: int, masked: bool) -> dict[str, Any]:
        """A decode call's arrays (`steps.decode_chunk`'s arguments after the pool), all rows
        inactive."""
        return dict(tokens=np.zeros(rows, np.int32), positions=np.zeros(rows, np.int32),
                    active=np.zeros(rows, bool), remaining=np.zeros(rows, np.int32),
                    table=np.zeros((rows, width), np.int32), bitmask=self._bitmask(rows, masked))

    def _bitmask(self, rows: int, masked: bool) -> np.ndarray | None:
        return np.full((rows, self.mask_words), -1, np.int32) if masked else None

    def run_prefill(self, weights: Any, pool: KVPool, a: dict, rows: dict) -> tuple:
        """Runs a prefill call on `a` (`prefill_arrays`, filled) → (pool, tokens, logprobs)."""
        return self.prefill(weights, pool, *self._put(_prefill_args(a, rows)))

    def run_decode(self, weights: Any, pool: KVPool, a: dict, rows: dict) -> tuple:
        """Runs a decode call on `a` (`decode_arrays`, filled) → (pool, *outputs); masked
        arrays run the one-step program."""
        program = self.decode if a["bitmask"] is None else self.decode_one
        return program(weights, pool, *self._put(_decode_args(a, rows)))

    def _put(self, tree):
        return tree if self.mesh is None else jax.device_put(tree, self.replicated)

    # ---- ahead of time ---------------------------------------------------------------------

    def trace(self, call: Call, weights: Any, pool: KVPool) -> jax.stages.Traced:
        """`call`'s program traced on abstract `weights` (`abstract_weights`) and `pool`
        (`abstract_pool`), its arrays replicated as the engine places them."""
        rows = self.row_arrays(call.rows)
        if call.kind == "prefill":
            a = self.prefill_arrays(call.rows, call.length, call.width, call.masked)
            program, args = self.prefill, _prefill_args(a, rows)
        else:
            a = self.decode_arrays(call.rows, call.width, call.masked)
            program = self.decode_one if call.masked else self.decode
            args = _decode_args(a, rows)
        return program.trace(weights, pool, *sharding_lib.abstract_on(args, self.replicated))


def _prefill_args(a: dict, rows: dict) -> tuple:
    """`steps.prefill`'s arguments after the pool, from `prefill_arrays` and `row_arrays`."""
    return (a["tokens"], a["start"], a["length"], a["write"], a["table"], RowParams(**rows),
            a["bitmask"])


def _decode_args(a: dict, rows: dict) -> tuple:
    """`steps.decode_chunk`'s arguments after the pool, from `decode_arrays` and
    `row_arrays`."""
    return (a["tokens"], a["positions"], a["active"], a["remaining"], a["table"],
            RowParams(**rows), a["bitmask"])
