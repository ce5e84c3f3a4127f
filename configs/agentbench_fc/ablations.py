"""The paper's ablations, each a change to one model's config.

    python -m launch.tpu_pod --config=configs/agentbench_fc/ablations.py:ABLATION[,MODEL] \\
        --config.model.path=... --config.env.controller_url=URL

ABLATION is one of
    no_cross_policy       every turn from the current policy (no stale snapshot)  (Table 6)
    no_task_adv_norm      GRPO advantages without the per-task normalisation      (Table 6)
    single_task_TASK      a specialist trained on TASK alone (alfworld, db, kg, os_interaction,
                          webshop), still evaluated on all five tasks             (Table 4)
    lora                  LoRA (rank 16, alpha 32, all projections) over a frozen bf16 base
                          instead of full fine-tuning, lr 1e-5 (not in the paper; docs/lora.md)
and MODEL a model file of this folder (default qwen25_14b, the paper's ablation model), e.g.

    --config=configs/agentbench_fc/ablations.py:no_cross_policy
    --config=configs/agentbench_fc/ablations.py:single_task_webshop,qwen25_7b

Each run gets its own run_dir (runs/agentbench_fc/MODEL-ABLATION).
"""

from __future__ import annotations

import importlib

import ml_collections

from environments.registry import AGENTBENCH_FC

DEFAULT_MODEL = "qwen25_14b"
MODELS = ("qwen25_3b", "qwen25_7b", "qwen25_14b", "qwen25_32b", "glm4_9b")
SINGLE_TASK = "single_task_"


def ablations() -> list[str]:
    return ["no_cross_policy", "no_task_adv_norm", "lora",
            *(SINGLE_TASK + t for t in AGENTBENCH_FC)]


def get_config(arg: str = "") -> ml_collections.ConfigDict:
    ablation, _, model = arg.partition(",")
    model = model or DEFAULT_MODEL
    if model not in MODELS:
        raise ValueError(f"unknown model {model!r}; known: {', '.join(MODELS)}")
    if ablation not in ablations():
        raise ValueError(f"unknown ablation {ablation!r}; known: {', '.join(ablations())} "
                         "(syntax: ablations.py:ABLATION[,MODEL])")
    c = importlib.import_module(f"configs.agentbench_fc.{model}").get_config()
    if ablation == "no_cross_policy":
        c.rl.pipeline.stale_policy_ratio = 0.0
    elif ablation == "no_task_adv_norm":
        c.rl.advantages.task_adv_norm = False
    elif ablation == "lora":
        # Adapters learn at a larger step than full weights; the KL reference is the base itself
        # (docs/lora.md).
        c.rl.trainer.lora.update(enabled=True, rank=16, alpha=32.0, base_dtype="bfloat16")
        c.rl.trainer.optimizer.learning_rate = 1e-5
    else:
        c.env.tasks = (ablation.removeprefix(SINGLE_TASK),)
        c.eval.tasks = AGENTBENCH_FC  # Table 4: specialists are tested on every task
    c.name = f"{model}-{ablation}"
    c.run_dir = f"runs/agentbench_fc/{c.name}"
    return c
