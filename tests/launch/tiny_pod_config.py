"""The AgentBench-FC base config shrunk to a tiny model on 2 × 2 CPU devices, for the
two-process test of `launch.tpu_pod` (the test sets model.path, controller_url and run_dir)."""

from __future__ import annotations

import ml_collections

from configs.agentbench_fc import base


def get_config() -> ml_collections.ConfigDict:
    c = base.get_config("tiny", parser="hermes")
    c.env.tasks = ("coin",)
    c.rl.engine.compute_dtype = None  # fp32 on CPU
    c.mesh.sampler_devices = 1  # process 0: sampler on its device 0, trainer on its device 1
    # Lockstep (staleness 0) with the stale snapshot refreshed every step: every token of step
    # s is sampled with the weights of step s - 1, which the test checks through the PPO ratio.
    c.rl.pipeline.update(steps=2, groups_per_step=2, group_size=4, rollout_workers=2,
                         max_staleness=0, stale_policy_ratio=0.5, stale_every=1)
    c.rl.limits.update(max_turns=1, max_context_tokens=512, max_new_tokens=12)
    c.rl.trainer.update(seq_buckets=(512,), tokens_per_micro=1536, compute_dtype=None,
                        remat=False)
    c.rl.trainer.optimizer.learning_rate = 1e-3
    c.rl.engine.update(max_batch=8, page_size=16, num_pages=256, max_context=512,
                       prefill_buckets=(256,), context_buckets=(512,), batch_buckets=(8,),
                       steps_per_sync=4)
    c.rl.checkpoint.update(every=1, keep=2)
    c.eval.update(tasks=("coin",), per_task=2, runs=1, concurrency=4)
    c.export.dtype = "float32"
    return c
