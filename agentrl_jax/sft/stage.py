"""The warm-start stage: a few epochs of masked-likelihood training on demonstrations.

Batches are built per length bucket (every demonstration of a step shares one row length, so a
step packs tightly and shapes come from `seq_buckets` only), in a seeded order that shuffles
both the demonstrations and the order of the bucketed steps every epoch.

With `lora.enabled` the stage trains adapters over the frozen model (`rl.train_step`) and
merges them into the model at the end, so RL starts from the warm-started weights (with fresh
adapters of its own, when it trains LoRA too).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import jax
import ml_collections
import numpy as np
from flax import nnx
from jax.sharding import Mesh

from agentrl_jax import stage_clock
from agentrl_jax.dataclass_config import mutable_copy
from agentrl_jax.models import lora as lora_lib
from agentrl_jax.rl import optimizer as optimizer_lib
from agentrl_jax.rl import train_step
from agentrl_jax.rl.batch import TrainBatch, Trajectory, pack
from agentrl_jax.sft import copy_stage, plan
from agentrl_jax.sft.trainer import SFTTrainer

StepCallback = Callable[[int, int, dict[str, float]], None]  # (step, total, metrics)


def default_config() -> ml_collections.ConfigDict:
    opt = optimizer_lib.default_config()
    opt.update(learning_rate=3e-3, schedule="cosine", warmup_steps=10, end_lr_factor=0.1,
               weight_decay=0.01)
    return ml_collections.ConfigDict(dict(
        epochs=2,
        tokens_per_step=16384,  # demonstration tokens per optimizer step (before padding)
        tokens_per_micro=8192,
        seq_buckets=(512, 1024, 2048, 4096),
        # > 0: that many row lengths chosen from the demonstrations' lengths (sft/plan.py's
        # cost model), in place of seq_buckets
        auto_buckets=0,
        # loss weight of the demonstrations' context tokens (the assistant's are 1):
        # a language-modelling term on the observations, free in compute (sft/demos.py)
        context_loss_weight=0.0,
        # share of the demonstrations trained with their rare copied words swapped for other
        # words of their task (sft/copy_swap.py): entities only reading the context predicts
        copy_swap_fraction=0.0,
        # a copy-forming stage before the demonstrations (sft/copy_stage.py)
        copy=copy_stage.default_config(),
        optimizer=opt,
        seed=0,
        lora=train_step.lora_config(),
        # e.g. "bfloat16": the trainer's compute dtype (fp32 master weights and Adam); faster
        # a step on a CPU with AVX512-BF16 or AMX, slower without (benchmarks/warm_start_step.py);
        # "auto": bf16 where this host runs it natively (agentrl_jax/precision.py)
        compute_dtype=ml_collections.config_dict.placeholder(str),
    ))


def run_sft(
    model,
    trajectories: Sequence[Trajectory],
    config: ml_collections.ConfigDict,
    mesh: Mesh,
    on_step: StepCallback | None = None,
):
    """Trains `model` in place on `trajectories`; returns the final train-step metrics.

    With LoRA, `model` ends up with the trained adapters merged in (it has none itself).
    """
    lengths = [len(t) for t in trajectories]
    row_multiple = mesh.shape.get("data", 1) * mesh.shape.get("fsdp", 1)
    buckets = tuple(config.seq_buckets)
    if config.get("auto_buckets", 0):
        buckets = plan.choose_buckets(
            lengths, int(config.auto_buckets), tokens_per_step=config.tokens_per_step,
            tokens_per_micro=config.tokens_per_micro, weight=plan.attention_weight(model.cfg),
            seed=config.seed, row_multiple=row_multiple)
        print(f"warm start: row lengths {buckets}, chosen from {len(lengths)} lengths")
    steps = plan.plan_steps(lengths, buckets, config.tokens_per_step, config.epochs, config.seed)
    tcfg = train_step.default_config()
    tcfg.update(seq_buckets=buckets, tokens_per_micro=config.tokens_per_micro,
                compute_dtype=config.get("compute_dtype"))
    tcfg.optimizer = mutable_copy(config.optimizer)
    if "lora" in config:
        tcfg.lora = mutable_copy(config.lora)
    # Short runs (fast mode) keep the schedule's shape: warm-up at most a quarter of the steps.
    tcfg.optimizer.warmup_steps = min(int(config.optimizer.warmup_steps), len(steps) // 4)
    tcfg.optimizer.total_steps = max(len(steps), tcfg.optimizer.warmup_steps + 1)
    trainer = SFTTrainer(model, tcfg, mesh)
    state = trainer.init_state(config.seed)
    metrics: dict[str, float] = {}
    for k, members in enumerate(steps, start=1):
        micro, num_tokens = pack([trajectories[i] for i in members], buckets,
                                 config.tokens_per_micro, row_multiple)
        state, metrics = trainer.step(state, micro, num_tokens)
        metrics["demo_tokens"] = float(sum(lengths[i] for i in members))
        if on_step is not None:
            on_step(k, len(steps), metrics)
    with stage_clock.span("transfer"):
        trained = trainer.model(jax.device_get(state.params))
    if model.cfg.lora is None:
        trained = lora_lib.merged(trained)
    nnx.update(model, nnx.state(trained))
    return metrics


def heldout_nll(trainer: SFTTrainer, params, batches: Sequence[TrainBatch]) -> float:
    """Mean masked NLL per token of `batches` under `params` (for a held-out check)."""
    total = count = 0.0
    for batch in batches:
        logp, _ = trainer.logprobs(params, batch)
        mask = np.asarray(batch.loss_mask)
        total += float(-(np.asarray(logp) * mask).sum())
        count += float(mask.sum())
    return total / max(count, 1.0)
