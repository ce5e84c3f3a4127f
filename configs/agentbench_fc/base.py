"""The AgentRL paper's settings on AgentBench-FC, shared by every model file beside this one.

    python -m launch.tpu_pod --config=configs/agentbench_fc/qwen25_14b.py \\
        --config.model.path=/models/Qwen2.5-14B-Instruct \\
        --config.env.controller_url=http://HOST:5020/api --config.run_dir=gs://BUCKET/run

The training and evaluation settings are the paper's and AgentRL's released configs' (listed
in docs/tpu_pod.md, "4. Configs"): five tasks trained together; 256 prompts per step × 8
samples (every complete group is taken, as AgentRL drains its buffer each step); 2048 episodes
in flight; temperature 0.8 in sampling and in the trainer's log-probs; lr 1e-6 constant, no
weight decay, gradient clip 1; PPO-clip 0.2 with dual-clip 3; k3 KL to the frozen initial
policy, 1e-4; entropy 0; up to 20 turns, 8192 tokens per episode, 1024 new tokens per turn;
−0.2 for any episode that does not complete; GRPO with task advantage normalisation;
cross-policy sampling with a stale snapshot taking 25% of turns, refreshed every 25 steps;
16,384 tokens per micro-batch; 1000 steps with a checkpoint (AgentRL: validation) every 25.
Evaluation: the test splits, 4 runs (the paper's mean ± std over 4), after RL. Qwen models
start RL straight from the Instruct checkpoint. The devices and the engine's shapes are ours,
for TPU v5p; which slice each model file fits: docs/tpu_pod.md, "What fits where".

Task names: the tasks default to the suite `environments.registry.AGENTBENCH_FC`, and the
controller is asked for `TASK-SPLIT` (`agentrl_jax.controller.task_keys.task_key`). Our fleet
(`launch.env_fleet`) serves `db-train`, `db-test`, ...: the defaults. An AgentRL/AgentBench
fleet names them e.g. `dbbench-env_train` / `dbbench-std`:

    --config.env.tasks="('alfworld','dbbench','kg','os','webshop')" \\
    --config.env.train_split=env_train --config.env.test_split=std

Devices (`mesh`, `pipeline.pod_layout`): process 0's first `sampler_devices` local devices run
the sampling engine (tensor parallel; process 0 must keep one for the trainer); with
`sampler_devices_per_host` (or `sampler_devices_by_process`, one count per process), the first
that many devices of every other host run samplers of their own too (engines and rollout
workers claiming groups from process 0's rollout hub), one replica per process or, with
`sampler_tensor_parallel`, replicas of that many devices each; every other device of the slice
trains (`mesh.trainer`: data × fsdp × tensor, one size -1 = the rest). The model files set sizes
for hosts of 4 chips with ~95 GB each (TPU v5p); the sampler keeps its weights and KV pool in
bf16 and computes in it (`rl.engine.compute_dtype`), half the HBM of the trainer's fp32 copies.
"""

from __future__ import annotations

import ml_collections

from agentrl_jax.experiment import policy as policy_lib
from agentrl_jax.experiment import rl_stage
from environments.registry import AGENTBENCH_FC


def get_config(name: str, parser: str, architecture: str = "") -> ml_collections.ConfigDict:
    """The paper's run of one model (`name` names the run; `parser`: its tool-call format;
    `architecture`: the published model, whose shape `--compile_only` builds without its
    checkpoint, `agentrl_jax.models.published`)."""
    c = ml_collections.ConfigDict()
    c.name = name
    c.deployment = "pod"  # processes and meshes it runs on (agentrl_jax/experiment/deployment.py)
    c.run_dir = f"runs/agentbench_fc/{name}"  # checkpoints (and final_model); or gs://...
    c.log_dir = ""  # metrics, eval results; "" = run_dir (or runs/NAME if run_dir is a URL)
    c.seed = 0

    c.env = ml_collections.ConfigDict(dict(
        controller_url="",  # required: the environment fleet's controller
        tasks=AGENTBENCH_FC,
        train_split="train",
        test_split="test",
    ))

    c.model = policy_lib.default_config()
    c.model.update(source="hf", path="", parser=parser)
    c.model.architecture = architecture  # the shape where model.path has no config.json

    c.mesh = ml_collections.ConfigDict(dict(
        sampler_devices=1,
        # Each other host's own sampler devices (0: it only trains), or one count per process
        # where hosts differ; replicas of `sampler_tensor_parallel` devices (0: one per
        # process); their weights placed device to device ("device") or through host memory
        # ("host"); their rollout hub listens on the leader at `hub_host` (default: all
        # interfaces, named by host name).
        sampler_devices_per_host=0,
        sampler_devices_by_process=(),
        sampler_tensor_parallel=0,
        weight_transfer="device",
        hub_host="",
        trainer=dict(data=1, fsdp=-1, tensor=1),
    ))

    c.rl = rl_stage.default_config()
    c.rl.pipeline.update(
        mode="async", steps=1000, groups_per_step=256, group_size=8,
        rollout_workers=256,  # groups in flight: 2048 episodes, as AgentRL's 2048 workers
        max_staleness=1,  # AgentRL's queue holds 2 batches: generation runs ~1 step ahead
        stale_policy_ratio=0.25, stale_every=25, seed=0)
    c.rl.pipeline.max_groups_per_step = None  # take every complete group

    # Sampling (`rl.sampling`) and the episode limits (`rl.limits`, `EpisodeLimits`) are
    # rl_stage's defaults, which are AgentRL's; the trainer's log-probs take the sampling
    # temperature (`trainer_driver.trainer_config`).

    c.rl.trainer.optimizer.update(learning_rate=1e-6, schedule="constant", warmup_steps=0,
                                  weight_decay=0.0, max_grad_norm=1.0)
    c.rl.trainer.loss.update(clip_eps_low=0.2, clip_eps_high=0.2, dual_clip_c=3.0,
                             kl_coef=1e-4, kl_estimator="k3", entropy_coef=0.0)
    c.rl.trainer.update(tokens_per_micro=16384, seq_buckets=(1024, 2048, 4096, 8192),
                        compute_dtype="bfloat16", remat=True)

    c.rl.advantages.update(incomplete_penalty=-0.2, task_adv_norm=True)

    # The engine's shapes, in tokens (`num_pages` KV pages of `page_size` tokens).
    # Prefill: a prompt is cut into bucket chunks only where that saves more than a call's
    # cost, taken as 1,024 positions on an accelerator (`prefill_call_tokens`, not measured
    # there; docs/performance.md, "Prefill"), else padded up; a call computes at most 8,192
    # positions, since four rows of 8,192 over an 8,192 context did not compile on v5p
    # (docs/tpu_pod.md): long chunks go one row a call.
    c.rl.engine.update(max_batch=64, page_size=16, num_pages=16384, max_context=8192,
                       prefill_buckets=(256, 1024, 4096, 8192), prefill_call_tokens=1024,
                       max_prefill_tokens=8192,
                       context_buckets=(1024, 2048, 4096, 8192), batch_buckets=(1, 8, 32, 64),
                       compute_dtype="bfloat16")
    c.rl.checkpoint.update(every=25, keep=3)

    c.eval = ml_collections.ConfigDict(dict(
        tasks=AGENTBENCH_FC,  # what the trained policy is tested on (single-task runs: all five)
        per_task=ml_collections.config_dict.placeholder(int),  # None: every test index
        runs=4,
        concurrency=256,
        before_rl=False,
        after_rl=True,
    ))

    c.export = ml_collections.ConfigDict(dict(
        dir="",  # "" = run_dir/final_model
        dtype="bfloat16",  # of the exported weights, as the released checkpoints
    ))
    return c
