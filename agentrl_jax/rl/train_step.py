"""The sharded policy-gradient train step.

One optimizer step over a batch that arrives as a list of packed micro-batches (`rl.batch`):

  for each micro-batch m:   G += ∇_θ L_m(θ),   L_m = Σ_{t in m} mask_t l_t / N_global
  θ, opt = AdamW(clip(G))                      (so G is the gradient of the global token mean)

The micro-batch loop is a Python loop around two jitted programs, not a `lax.scan`: the first
micro-batch's gradient, which becomes the accumulator (no zero tree of the parameters' size to
fill and add to: `benchmarks/probes/first_gradient.py`), then `accumulate` for each further
one. An RL batch's token count (hence its number of micro-batches) changes every step, and a
scan would recompile for each count or pad with empty micro-batches. Micro-batch shapes come
from the few buckets of `rl.batch.pack`, so after warm-up nothing recompiles; `num_traces` and
`num_accumulate_traces` count the two programs' traces.

The loss reads only the agent's tokens (the loss mask), about a tenth of an episode's; with
`logprob_min_positions` > 0 a micro-batch's final hidden states are projected onto the
vocabulary at those positions alone (`rl.batch.loss_positions`, at least that many a row).

Parameters are fp32 master weights in a pure pytree, sharded by their logical axes over the
trainer mesh (data × fsdp × tensor); the optimizer moments share the parameters' shardings; the
batch is split over (data, fsdp). Compute runs in `compute_dtype` (bf16 by choice): the model
casts parameters to its `cfg.dtype` inside the forward, so gradients arrive in fp32.

With `lora.enabled`, the model gets low-rank adapters (`models.lora`) and only they train:
`TrainState.params` is the adapter tree, so gradients, optimizer moments and checkpoints hold
adapters alone; the base weights are a frozen tree the trainer keeps (optionally in
`lora.base_dtype`, e.g. bf16, while the adapters stay fp32) and passes to every step as a
non-differentiated argument. The KL reference, when none is given, is that same base tree with
the adapters off: no second copy of the model.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax
from flax import nnx
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from agentrl_jax import precision, stage_clock
from agentrl_jax.models import lora as lora_lib
from agentrl_jax.models.config import PROJECTIONS, LoraConfig
from agentrl_jax.models.decoder import Decoder, LoraParam
from agentrl_jax.models.logprobs import token_logprobs
from agentrl_jax.parallel import sharding as sharding_lib
from agentrl_jax.rl import losses
from agentrl_jax.rl import optimizer as optimizer_lib
from agentrl_jax.rl.batch import TrainBatch, loss_positions

Params = Any


def default_config() -> ml_collections.ConfigDict:
    return ml_collections.ConfigDict(
        dict(
            loss=losses.default_config(),
            optimizer=optimizer_lib.default_config(),
            # Log-probs of softmax(logits / temperature), the distribution the sampler drew
            # from. Unset: the RL stage's `sampling.temperature` (`trainer_driver.
            # trainer_config`); 1.0 for a trainer used on its own.
            temperature=ml_collections.config_dict.placeholder(float),
            logprob_chunk=256,  # sequence chunk of the vocabulary projection
            # keep a micro-batch's fp32 logits for the backward pass up to this many bytes
            # (skips recomputing the vocabulary projection); past it they are recomputed
            logprob_keep_bytes=1 << 30,
            # > 0: project only the positions the loss reads (`rl.batch.loss_positions`) onto
            # the vocabulary, at least this many per row; 0: every position. Off by default:
            # no faster on CPU (benchmarks/probes/loss_positions.py, docs/performance.md)
            logprob_min_positions=0,
            remat=False,  # recompute each block in the backward pass
            # e.g. "bfloat16"; "auto": bf16 where this host runs it natively (precision.py)
            compute_dtype=ml_collections.config_dict.placeholder(str),
            seq_buckets=(128, 256, 512, 1024, 2048, 4096, 8192),
            tokens_per_micro=16384,
            lora=lora_config(),
        )
    )


def lora_config() -> ml_collections.ConfigDict:
    """`trainer.lora`: train low-rank adapters over a frozen base instead of every weight."""
    return ml_collections.ConfigDict(dict(
        enabled=False,
        rank=16,
        alpha=32.0,  # adapter output scaled by alpha / rank
        targets=PROJECTIONS,  # any of q_proj k_proj v_proj o_proj gate_proj up_proj down_proj
        seed=0,  # initialisation of A (B starts at zero)
        base_dtype=ml_collections.config_dict.placeholder(str),  # frozen base, e.g. "bfloat16"
        peft_adapter=ml_collections.config_dict.placeholder(str),  # PEFT dir to start from
    ))


def lora_of(config: ml_collections.ConfigDict) -> LoraConfig | None:
    """The `LoraConfig` of a trainer config's `lora` section (None when disabled or absent)."""
    c = config.get("lora")
    if c is None or not c.enabled:
        return None
    return LoraConfig(rank=int(c.rank), alpha=float(c.alpha), targets=tuple(c.targets))


# The frozen KL reference model's dtype (its parameters and compute): half the memory of the
# fp32 policy, and its log-probabilities only enter the loss through the small KL term.
REFERENCE_DTYPE = jnp.bfloat16


def needs_reference(config: ml_collections.ConfigDict) -> bool:
    """Whether a trainer of `config` (a trainer config) takes a separate frozen KL reference
    model: a KL term without LoRA (with LoRA, the frozen base is the reference)."""
    return bool(config.loss.kl_coef) and lora_of(config) is None


def with_trainer_adapters(model: Decoder, config: ml_collections.ConfigDict) -> Decoder:
    """`model` with the adapters `config` (a trainer config) asks for: fresh (B = 0) or read
    from `lora.peft_adapter`; `model` itself when LoRA is off or it has adapters already."""
    lora = lora_of(config)
    if lora is None or model.cfg.lora is not None:
        return model
    if config.lora.peft_adapter:
        from agentrl_jax.models import peft_io

        return peft_io.load_adapter(model, config.lora.peft_adapter)
    return lora_lib.with_adapters(model, lora, seed=int(config.lora.seed))


@jax.tree_util.register_dataclass
@dataclasses.dataclass
class TrainState:
    """Everything that changes from step to step (and goes into checkpoints)."""

    params: Params
    opt_state: optax.OptState
    step: jax.Array  # int32 scalar
    rng: jax.Array  # key data, for whatever samples alongside training


def _like_params(tree, params_struct, param_leaf_fn, other_leaf_fn):
    """Maps subtrees shaped like the parameters (Adam's mu, nu) and every other leaf."""

    def is_params(x):
        return jax.tree.structure(x) == params_struct

    return jax.tree.map(
        lambda x: param_leaf_fn(x) if is_params(x) else other_leaf_fn(x), tree, is_leaf=is_params
    )


def _on_mesh(fn, tree: Any, shardings: Any) -> Any:
    """`fn(tree)` on `shardings` (an identity `fn` places without a copy); for an abstract
    `tree` (a model built by `nnx.eval_shape`, as an ahead-of-time compilation passes), the
    result's shapes on them."""
    if sharding_lib.is_abstract(tree):
        return sharding_lib.abstract_on(jax.eval_shape(fn, tree), shardings)
    out = fn(tree)
    if out is tree:
        return jax.device_put(tree, shardings)
    return jax.jit(fn, out_shardings=shardings)(tree)


class Trainer:
    """Owns the jitted functions and shardings; the state itself is a `TrainState` pytree."""

    def __init__(
        self,
        model: Decoder,
        config: ml_collections.ConfigDict,
        mesh: Mesh,
        rules: sharding_lib.Rules = sharding_lib.DEFAULT_RULES,
        reference: Decoder | None = None,
    ):
        self.config = config
        self.mesh = mesh
        self.temperature = 1.0 if config.temperature is None else float(config.temperature)
        # Incremented at trace time, recompilation counters: of the gradient program every
        # step runs once (its first micro-batch), and of the one adding further micro-batches.
        self.num_traces = 0
        self.num_accumulate_traces = 0
        model = with_trainer_adapters(model, config)
        self.lora = model.cfg.lora if lora_of(config) is not None else None
        graphdef, state = nnx.split(model)
        compute_dtype = precision.resolve(config.compute_dtype)
        if compute_dtype:
            # The compute dtype lives in the (static) model config; parameters stay as they are.
            clone = nnx.merge(graphdef, state)
            clone.cfg = clone.cfg.replace(dtype=jnp.dtype(compute_dtype))
            graphdef, state = nnx.split(clone)
        self.graphdef = graphdef
        # Trainable (all parameters, or the adapters) and frozen (nothing, or the base) trees.
        if self.lora is not None:
            _, *split_states = nnx.split(nnx.merge(graphdef, state), LoraParam, ...)
            trainable, frozen = split_states
        else:
            trainable, frozen = state, nnx.State({})
        self.param_shardings = nnx.to_pure_dict(
            sharding_lib.state_shardings(trainable, mesh, rules))
        self._params_struct = jax.tree.structure(self.param_shardings)
        self.replicated = NamedSharding(mesh, PartitionSpec())
        batch_axes = sharding_lib.logical_to_spec(("batch", None), rules, mesh)
        self.batch_sharding = NamedSharding(mesh, batch_axes)
        # The model's own arrays; copied onto the mesh by `init_state` (steps donate theirs).
        self._model_params = nnx.to_pure_dict(trainable)
        self._abstract_params = sharding_lib.abstract_on(self._model_params)
        self.frozen_params = self._place_frozen(frozen, rules)
        self._base_fingerprint: str | None = None

        self.ref_graphdef = self.ref_params = None
        if reference is not None:
            ref_graphdef, ref_state = nnx.split(reference)
            ref_shardings = nnx.to_pure_dict(sharding_lib.state_shardings(ref_state, mesh, rules))
            self.ref_graphdef = ref_graphdef
            self.ref_params = _on_mesh(lambda p: p, nnx.to_pure_dict(ref_state), ref_shardings)
        elif self.lora is not None:
            # The base, adapters off: the same arrays as `frozen_params`, not a copy.
            self.ref_graphdef = nnx.graphdef(lora_lib.without_adapters(self.model_view()))
            self.ref_params = self.frozen_params

        self.tx = optimizer_lib.make_optimizer(config.optimizer)
        self.schedule = optimizer_lib.make_schedule(config.optimizer)
        abstract_opt = jax.eval_shape(self.tx.init, self._abstract_params)
        self.opt_shardings = _like_params(
            abstract_opt, self._params_struct, lambda _: self.param_shardings,
            lambda _: self.replicated,
        )
        self.state_shardings = TrainState(  # the same tree, of shardings
            self.param_shardings, self.opt_shardings,
            self.replicated, self.replicated,  # type: ignore[arg-type]
        )
        self._init_opt = jax.jit(self.tx.init, out_shardings=self.opt_shardings)
        self._gradient = jax.jit(
            self._gradient_impl, out_shardings=(self.param_shardings, self.replicated))
        self._accumulate = jax.jit(
            self._accumulate_impl, donate_argnums=(1,),
            out_shardings=(self.param_shardings, self.replicated),
        )
        self._apply = jax.jit(
            self._apply_impl, donate_argnums=(0,),
            out_shardings=(self.state_shardings, self.replicated),
        )
        self._logprobs = jax.jit(self._logprobs_impl)

    # ---- state ---------------------------------------------------------------------------

    def _place_frozen(self, frozen: nnx.State, rules: sharding_lib.Rules) -> Params:
        """The frozen base on the mesh, cast to `lora.base_dtype` when set ({} without LoRA)."""
        if self.lora is None:
            return {}
        shardings = nnx.to_pure_dict(sharding_lib.state_shardings(frozen, self.mesh, rules))
        dtype = self.config.lora.base_dtype
        return _on_mesh(lambda p: lora_lib.cast_base(p, dtype), nnx.to_pure_dict(frozen),
                        shardings)

    @property
    def base_fingerprint(self) -> str | None:
        """`models.lora.base_fingerprint` of the frozen base (None without LoRA): what a LoRA
        checkpoint and a sampling worker's base must match. Computed on the trainer's devices;
        on several processes every one must read it (all get the same value)."""
        if self.lora is not None and self._base_fingerprint is None:
            self._base_fingerprint = lora_lib.base_fingerprint(self.frozen_params)
        return self._base_fingerprint

    def adapter_config(self) -> dict[str, Any] | None:
        """JSON description of the adapters (None without LoRA), stored with checkpoints."""
        if self.lora is None:
            return None
        return {"rank": self.lora.rank, "alpha": self.lora.alpha,
                "targets": list(self.lora.targets), "base_dtype": self.config.lora.base_dtype}

    def model_view(self, params: Params | None = None, base: Params | None = None) -> Decoder:
        """The Decoder of `params` (default: the initial ones) over the frozen base (`base`:
        a copy of `frozen_params` elsewhere, e.g. on a multi-host leader's host, whose own
        `frozen_params` span other processes' devices; default the trainer's)."""
        params = self._model_params if params is None else params
        base = self.frozen_params if base is None else base
        return nnx.merge(self.graphdef, lora_lib.combine(base, params))

    def init_state(self, seed: int = 0) -> TrainState:
        # A jitted copy, not device_put: device_put may alias the model's buffer on a device
        # (even with may_alias=False, for replicated shardings), and steps donate the params.
        params = jax.jit(
            lambda p: jax.tree.map(jnp.copy, p), out_shardings=self.param_shardings
        )(self._model_params)
        return TrainState(
            params=params,
            opt_state=self._init_opt(params),
            step=jax.device_put(jnp.zeros((), jnp.int32), self.replicated),
            rng=jax.device_put(jax.random.key_data(jax.random.key(seed)), self.replicated),
        )

    def model(self, params: Params, base: Params | None = None) -> Decoder:
        """A Decoder view of `params` (for sampling or export); with LoRA, base + adapters
        (`base`: as in `model_view`)."""
        return self.model_view(params, base)

    def _placed(self, batch: TrainBatch) -> TrainBatch:
        """A micro-batch for the gradient: with the loss's positions (`loss_positions`) unless
        `logprob_min_positions` is 0 or they are (nearly) all of it, then on the mesh."""
        min_width = int(self.config.logprob_min_positions)
        if min_width and batch.loss_at is None:
            at = loss_positions(np.asarray(batch.loss_mask), min_width)
            batch = dataclasses.replace(batch, loss_at=at)
        return self.shard_batch(batch)

    def shard_batch(self, batch: TrainBatch) -> TrainBatch:
        """The host batch onto the trainer mesh. On several processes (each holding the same
        batch) each places its own slices: `jax.device_put` would first check that the copies
        agree with a collective over every device of the slice, sampler chips included, which
        can interleave with the trainer's own collectives."""
        sharding = self.batch_sharding
        if sharding.is_fully_addressable:
            return jax.device_put(batch, sharding)
        return jax.tree.map(
            lambda x: jax.make_array_from_callback(x.shape, sharding, lambda index: x[index]),
            batch)

    # ---- traced functions ----------------------------------------------------------------

    def _forward(self, graphdef, params, batch: TrainBatch):
        model = nnx.merge(graphdef, params)
        at = None if batch.loss_at is None else jnp.asarray(batch.loss_at)
        return token_logprobs(
            model, jnp.asarray(batch.tokens), jnp.asarray(batch.positions),
            jnp.asarray(batch.segment_ids), jnp.asarray(batch.targets),
            temperature=self.temperature, chunk_size=self.config.logprob_chunk,
            remat=self.config.remat, entropy_grad=bool(self.config.loss.entropy_coef),
            keep_logits_bytes=self.config.logprob_keep_bytes, at=at,
        )

    def _micro_loss(self, params, batch: TrainBatch, num_tokens, ref_params):
        loss_cfg = self.config.loss
        logp, entropy = self._forward(self.graphdef, params, batch)
        ref = None if batch.reference_logprobs is None else jnp.asarray(batch.reference_logprobs)
        if ref is None and ref_params is not None and loss_cfg.kl_coef:
            ref = jax.lax.stop_gradient(self._forward(self.ref_graphdef, ref_params, batch)[0])
        if loss_cfg.kl_coef and ref is None:
            raise ValueError("kl_coef > 0 needs a reference model or reference_logprobs")
        prox = None if batch.proximal_logprobs is None else jnp.asarray(batch.proximal_logprobs)
        if loss_cfg.decoupled and prox is None:
            # One update per batch: the proximal policy is θ at the start of the step.
            prox = jax.lax.stop_gradient(logp)
        return losses.policy_loss(
            logp, jnp.asarray(batch.behaviour_logprobs), jnp.asarray(batch.advantages),
            jnp.asarray(batch.loss_mask), num_tokens,
            loss_cfg, prox_logp=prox, ref_logp=ref, entropy=entropy,
        )

    def _micro_gradient(self, params, batch, num_tokens, ref_params, frozen):
        def loss(trainable):  # differentiated in the trainable tree only; the base is frozen
            full = lora_lib.combine(frozen, trainable)
            return self._micro_loss(full, batch, num_tokens, ref_params)

        return jax.grad(loss, has_aux=True)(params)

    def _gradient_impl(self, params, batch, num_tokens, ref_params, frozen):
        self.num_traces += 1
        return self._micro_gradient(params, batch, num_tokens, ref_params, frozen)

    def _accumulate_impl(self, params, grads, batch, num_tokens, ref_params, frozen):
        self.num_accumulate_traces += 1
        g, metrics = self._micro_gradient(params, batch, num_tokens, ref_params, frozen)
        return jax.tree.map(jnp.add, grads, g), metrics

    def _apply_impl(self, state: TrainState, grads):
        updates, opt_state = self.tx.update(grads, state.opt_state, state.params)
        params = optax.apply_updates(state.params, updates)
        metrics = {
            "grad_norm": optax.tree.norm(grads),
            "learning_rate": self.schedule(state.step),
        }
        return TrainState(params, opt_state, state.step + 1, state.rng), metrics

    def _logprobs_impl(self, params, batch, frozen):
        return self._forward(self.graphdef, lora_lib.combine(frozen, params), batch)

    @property
    def row_multiple(self) -> int:
        """Rows of a micro-batch come in multiples of this: the batch axes' devices."""
        return self.mesh.shape.get("data", 1) * self.mesh.shape.get("fsdp", 1)

    # ---- ahead of time --------------------------------------------------------------------

    def abstract_state(self) -> TrainState:
        """The train state's shapes on its shardings (what `init_state` would allocate)."""
        state = jax.eval_shape(lambda p: TrainState(p, self.tx.init(p), jnp.zeros((), jnp.int32),
                                                    jax.random.key_data(jax.random.key(0))),
                               self._abstract_params)
        return sharding_lib.abstract_on(state, self.state_shardings)

    def trace(self, micro_batch: TrainBatch) -> dict[str, jax.stages.Traced]:
        """A step's programs traced for micro-batches shaped like `micro_batch` (arrays or
        `jax.ShapeDtypeStruct`s): "gradient" (a step's first micro-batch), "accumulate" (each
        further one) and "apply" (the optimizer update). Nothing is allocated or run
        (`.lower().compile()` compiles one), so the model may be abstract and the mesh a TPU
        topology's (`agentrl_jax.aot`)."""
        state = self.abstract_state()
        batch = sharding_lib.abstract_on(micro_batch, self.batch_sharding)
        inputs = (jax.ShapeDtypeStruct((), jnp.float32, sharding=self.replicated),
                  self.ref_params, self.frozen_params)
        grads = sharding_lib.abstract_on(state.params, self.param_shardings)
        return {"gradient": self._gradient.trace(state.params, batch, *inputs),
                "accumulate": self._accumulate.trace(state.params, grads, batch, *inputs),
                "apply": self._apply.trace(state, grads)}

    # ---- public --------------------------------------------------------------------------

    def logprobs(self, params: Params, batch: TrainBatch, base: Params | None = None
                 ) -> tuple[jax.Array, jax.Array]:
        """(log π_θ(targets), entropy) [B, T]: e.g. proximal log-probs before an update
        (`base`: as in `model_view`)."""
        base = self.frozen_params if base is None else base
        return self._logprobs(params, self.shard_batch(batch), base)

    def gradients(
        self, params: Params, micro_batches: list[TrainBatch], num_loss_tokens: float
    ) -> tuple[Params, dict[str, jax.Array]]:
        """∇ of the global token-mean loss, accumulated over micro-batches, and loss metrics."""
        if not micro_batches:
            raise ValueError("a gradient needs at least one micro-batch")
        num_tokens = jnp.asarray(num_loss_tokens, jnp.float32)
        inputs = (num_tokens, self.ref_params, self.frozen_params)
        first, *rest = micro_batches
        grads, m = self._gradient(params, self._placed(first), *inputs)
        per_micro = [m]
        for mb in rest:
            grads, m = self._accumulate(params, grads, self._placed(mb), *inputs)
            per_micro.append(m)
        stacked = jax.tree.map(lambda *xs: jnp.stack(xs), *per_micro)
        return grads, losses.reduce_metrics(stacked)

    def step(
        self, state: TrainState, micro_batches: list[TrainBatch], num_loss_tokens: float
    ) -> tuple[TrainState, dict[str, float]]:
        """One optimizer step over all micro-batches; `state` is consumed (donated)."""
        with stage_clock.span("train_step"):   # ends with the metrics on the host: synced
            grads, metrics = self.gradients(state.params, micro_batches, num_loss_tokens)
            state, apply_metrics = self._apply(state, grads)
            return state, {k: float(v) for k, v in {**metrics, **apply_metrics}.items()}
