"""Every device program a run executes, traced for a slice's devices from its config alone.

The meshes (`pipeline.pod_layout`), the shardings, the trainer (`rl.train_step.Trainer`) and
the sampler's programs (`sampling.programs.SamplerPrograms`) are the ones a run builds, over a
model made by `nnx.eval_shape`: no weight is read and nothing is allocated. What each program
cannot see, the buffers other programs keep resident on the same chips while it runs, is
counted per program as `held_bytes`:

  trainer   the optimizer moments during the gradient programs (their arguments are the
            parameters, the batch, the KL reference); the KL reference during the update
  sampler   further copies of the weights beside the ones a call reads: the next version,
            placed while requests in flight finish on the current one, and the stale snapshot
            of cross-policy sampling (`pipeline.stale_policy_ratio` > 0), each in the engine's
            `compute_dtype` (weights are cast before they are copied over); with LoRA the
            copies are adapters over one shared base, and none is counted
  sync      the train state and reference, and the snapshot of the weights being gathered
"""

from __future__ import annotations

import dataclasses
import math
import pathlib
from typing import Any

import jax
import jax.numpy as jnp
import ml_collections
from flax import nnx

from agentrl_jax.dataclass_config import dataclass_from
from agentrl_jax.models.config import ModelConfig
from agentrl_jax.models.decoder import Decoder
from agentrl_jax.models.published import published_config
from agentrl_jax.parallel import sharding as sharding_lib
from agentrl_jax.parallel.mesh import make_mesh
from agentrl_jax.pipeline import pod_layout
from agentrl_jax.pipeline.trainer_driver import ParamGather, trainer_config
from agentrl_jax.rl import train_step
from agentrl_jax.rl.batch import TrainBatch, micro_rows
from agentrl_jax.sampling.engine import EngineConfig
from agentrl_jax.sampling.programs import Call, SamplerPrograms
from agentrl_jax.sampling.weights import weight_shardings, weights_of

TRAINER, SAMPLER, SYNC = "trainer", "sampler", "sync"


@dataclasses.dataclass
class Program:
    """One traced program and what it shares its chips with."""

    name: str
    role: str  # TRAINER, SAMPLER or SYNC
    traced: jax.stages.Traced  # `.lower().compile()` compiles it; `.jaxpr` is what it runs
    chips: int  # devices it spans
    held_bytes: float  # per chip: resident buffers that are not its arguments (see above)
    tokens: int = 0  # a train program's micro-batch tokens (0 for any other program)


def model_config(model: ml_collections.ConfigDict) -> ModelConfig:
    """The policy's shape from a run's `model` config: the checkpoint's `config.json` where
    `path` names one, else the published shape `architecture` names (`models.published`),
    else the scratch model's (`model.scratch`, `model.vocab_size`)."""
    if model.get("path") and (pathlib.Path(model.path) / "config.json").is_file():
        import json

        return ModelConfig.from_hf(json.loads((pathlib.Path(model.path) / "config.json")
                                              .read_text()))
    if model.get("architecture"):
        return published_config(model.architecture)
    if model.source == "scratch":
        return ModelConfig(vocab_size=int(model.vocab_size), **model.scratch.to_dict())
    raise ValueError("the model's shape is unknown without its checkpoint: set model.path to "
                     "an HF directory (only config.json is read) or model.architecture to one "
                     "of agentrl_jax.models.published.HF_CONFIGS")


def per_chip_bytes(tree: Any) -> float:
    """Bytes one device holds of `tree` (ShapeDtypeStructs on shardings; the largest shard)."""
    total = 0.0
    for x in jax.tree.leaves(tree):
        shape = x.sharding.shard_shape(x.shape) if x.sharding is not None else x.shape
        total += math.prod(shape) * jnp.dtype(x.dtype).itemsize
    return total


def _abstract(cfg: ModelConfig) -> Decoder:
    return nnx.eval_shape(lambda: Decoder(cfg, rngs=nnx.Rngs(0)))


def build_trainer(config: ml_collections.ConfigDict, cfg: ModelConfig,
                  layout: pod_layout.Layout) -> train_step.Trainer:
    """The run's trainer over an abstract policy (and KL reference) on the trainer mesh."""
    tcfg = trainer_config(config.rl)
    lora = train_step.lora_of(tcfg)
    model = _abstract(cfg.replace(lora=lora) if lora else cfg)
    reference = None
    if train_step.needs_reference(tcfg):
        reference = _abstract(cfg.replace(dtype=train_step.REFERENCE_DTYPE,
                                          param_dtype=train_step.REFERENCE_DTYPE))
    return train_step.Trainer(model, tcfg, layout.trainer, reference=reference)


def trainer_resident_bytes(trainer: train_step.Trainer) -> float:
    """What stays on each trainer chip between programs: the state and the reference."""
    return per_chip_bytes((trainer.abstract_state(), trainer.ref_params, trainer.frozen_params))


def trainer_programs(trainer: train_step.Trainer, every_bucket: bool = True) -> list[Program]:
    """The train step's programs at every sequence bucket's full micro-batch, and the update.
    `every_bucket=False`: only the longest bucket's `accumulate`, the memory peak (a step's
    first micro-batch runs `gradient`, the same program less the gradient it adds to)."""
    state = trainer.abstract_state()
    opt_bytes = per_chip_bytes((state.opt_state, state.step, state.rng))
    ref_bytes = per_chip_bytes((trainer.ref_params, trainer.frozen_params))
    chips = trainer.mesh.devices.size
    programs = []
    lengths = sorted(set(trainer.config.seq_buckets))
    for length in lengths if every_bucket else lengths[-1:]:
        rows = micro_rows(length, int(trainer.config.tokens_per_micro), trainer.row_multiple)
        traced = trainer.trace(TrainBatch.zeros(rows, length))
        for kind in ("gradient", "accumulate") if every_bucket else ("accumulate",):
            programs.append(Program(f"train_{kind}_{rows}x{length}", TRAINER, traced[kind],
                                    chips, opt_bytes, tokens=rows * length))
    programs.append(Program("train_apply", TRAINER, traced["apply"], chips, ref_bytes))
    return programs


@dataclasses.dataclass
class Sampler:
    """Process 0's first sampler replica, abstract: its programs, weights, pool, and how many
    copies of the weights it holds at once (see the module docstring)."""

    programs: SamplerPrograms
    weights: Any
    pool: Any
    copies: int

    def resident_bytes(self) -> float:
        """What stays on each of its chips: the weight copies and the KV pool."""
        return self.copies * per_chip_bytes(self.weights) + per_chip_bytes(self.pool)


def build_sampler(config: ml_collections.ConfigDict, cfg: ModelConfig,
                  layout: pod_layout.Layout) -> Sampler:
    """The sampler replica as `launch.tpu_pod` builds it: weights, pool and compute in the
    engine's `compute_dtype` (`SamplerPrograms`), adapters where the trainer has them."""
    lora = train_step.lora_of(trainer_config(config.rl))
    sampler_cfg = cfg.replace(lora=lora)
    mesh = layout.samplers[0]
    programs = SamplerPrograms(sampler_cfg, dataclass_from(config.rl.engine, EngineConfig),
                               mesh, weight_shardings(_abstract(sampler_cfg), mesh))
    weights = programs.abstract_weights(
        jax.eval_shape(lambda: weights_of(Decoder(sampler_cfg, rngs=nnx.Rngs(0)))))
    copies = 1 if lora else 2 + (float(config.rl.pipeline.stale_policy_ratio) > 0)
    return Sampler(programs, weights, programs.abstract_pool(), copies)


def sampler_programs(sampler: Sampler, every_bucket: bool = True) -> list[Program]:
    """The sampler's prefill and decode programs at every bucket (`every_bucket=False`: each
    kind's largest shape, the memory peak)."""
    held = (sampler.copies - 1) * per_chip_bytes(sampler.weights)
    calls = sampler.programs.calls()
    if not every_bucket:
        calls = [max((c for c in calls if c.kind == kind), key=_call_size)
                 for kind in ("prefill", "decode")]
    mesh = sampler.programs.mesh
    chips = 1 if mesh is None else mesh.devices.size
    return [Program(call.name, SAMPLER, sampler.programs.trace(call, sampler.weights,
                                                               sampler.pool), chips, held)
            for call in calls]


def _call_size(call: Call) -> tuple[int, int]:
    """What a call's temporaries grow with: rows × (new tokens + context)."""
    return call.rows * (call.length + call.width), call.rows


def sync_programs(trainer: train_step.Trainer, processes: int,
                  sampler_dtype: str | None = None) -> list[Program]:
    """The weight gather of a multi-process run (`trainer_driver.ParamGather`, one layer at a
    time for stacked leaves, cast to the samplers' `sampler_dtype` unless the trainer's are
    adapters); none on one process, whose weights reach the sampler by a device-to-device
    copy, which compiles nothing."""
    if processes < 2:
        return []
    state = trainer.abstract_state()
    snapshot = sharding_lib.abstract_on(state.params, trainer.param_shardings)
    held = trainer_resident_bytes(trainer) + per_chip_bytes(snapshot)
    chips = trainer.mesh.devices.size
    return [Program(f"sync_gather_{name}", SYNC, traced, chips, held)
            for name, traced in ParamGather(
                None if trainer.lora is not None else sampler_dtype).trace(snapshot).items()]


def local_layout(devices: list[jax.Device]) -> pod_layout.Layout:
    """`launch.local`'s layout: the sampler and the trainer share one device."""
    if len(devices) != 1:
        raise ValueError(f"a config without `mesh` runs on one device (launch.local); the "
                         f"topology has {len(devices)}: pick a one-chip topology, e.g. v6e:1x1")
    mesh = make_mesh(devices=devices)
    return pod_layout.Layout(trainer=mesh, samplers=[mesh], replicas_by_process=(1,))


def layout_of(config: ml_collections.ConfigDict, devices: list[jax.Device]
              ) -> pod_layout.Layout:
    """The run's layout on `devices`: a config with a `mesh` is a pod run (`launch.tpu_pod`,
    `pipeline.pod_layout`); one without is `launch.local`'s, one device for both."""
    if "mesh" not in config:
        return local_layout(devices)
    return pod_layout.build_layout(config.mesh, devices, process_index=0)


def resident_bytes(config: ml_collections.ConfigDict, devices: list[jax.Device]
                   ) -> dict[str, float]:
    """Per chip, what the trainer and the sampler keep between programs, without tracing a
    program (seconds, where compiling takes minutes): a slice this does not fit, nothing
    will. On a shared chip (`launch.local`) both count for each."""
    layout = layout_of(config, devices)
    cfg = model_config(config.model)
    trainer = trainer_resident_bytes(build_trainer(config, cfg, layout))
    sampler = build_sampler(config, cfg, layout).resident_bytes()
    if "mesh" not in config:
        return {TRAINER: trainer + sampler, SAMPLER: trainer + sampler}
    return {TRAINER: trainer, SAMPLER: sampler}


def run_programs(config: ml_collections.ConfigDict, devices: list[jax.Device],
                 every_bucket: bool = True) -> list[Program]:
    """Every program a run of `config` executes on `devices` (a slice, e.g.
    `hardware.topology_devices`), traced as process 0 builds them (`layout_of`);
    `every_bucket=False`: only each kind's largest shape (the memory peaks). On a shared chip
    (`launch.local`) each program also holds what the other role keeps."""
    layout = layout_of(config, devices)
    cfg = model_config(config.model)
    trainer = build_trainer(config, cfg, layout)
    sampler = build_sampler(config, cfg, layout)
    trained = trainer_programs(trainer, every_bucket)
    sampled = sampler_programs(sampler, every_bucket)
    if "mesh" not in config:
        for program in trained:
            program.held_bytes += sampler.resident_bytes()
        for program in sampled:
            program.held_bytes += trainer_resident_bytes(trainer)
    processes = len({d.process_index for d in devices})
    return [*trained, *sampled,
            *sync_programs(trainer, processes, config.rl.engine.get("compute_dtype"))]
