"""The main job's embedded default: all five AgentBench-FC tasks on one 2-core CPU in ~30 min.

A small Llama-style model is trained from scratch with its own 4k-entry BPE tokenizer: warm
start on oracle demonstrations, then asynchronous multi-task RL with cross-policy sampling and
task advantage normalisation, evaluated on each task's test split before and after RL.

    python -m launch.local                                   # this config
    python -m launch.local --config=configs/local_default.py:fast   # a few steps (CI)
    python -m launch.local --config.rl.pipeline.steps=60 --config.run_dir=runs/longer
"""

from __future__ import annotations

import ml_collections

from agentrl_jax.evaluation import protocol
from agentrl_jax.experiment import policy as policy_lib
from agentrl_jax.experiment import rl_stage
from agentrl_jax.sft import stage as sft_stage
from environments.registry import AGENTBENCH_FC


def env_config() -> ml_collections.ConfigDict:
    return ml_collections.ConfigDict(dict(
        controller_url="",  # an existing (AgentRL-compatible) controller; "" starts our own
        sandbox=True,  # each task worker in its own bubblewrap sandbox (as root: but the OS one)
        # A launcher that is not host root refuses to start the OS task (its machines' overlay
        # root, cgroups, disk quota need root); True starts it on the weaker seeded root.
        allow_root_fallback=False,
        tasks=AGENTBENCH_FC,
        concurrency=64,  # episodes per worker
        train_split="train",
        test_split="test",
    ))


def get_config(mode: str = "") -> ml_collections.ConfigDict:
    """The AgentBench job, then the tic-tac-toe stage (`game`, run when `game_stage`)."""
    from configs import local_tictactoe  # it builds on agentbench_config

    c = agentbench_config(mode)
    # Tic-tac-toe, a game a small model masters, in a stage of its own after the AgentBench
    # tasks (configs/local_tictactoe.py), under RUN_DIR/tictactoe with the same warm-start
    # cache: its own 0.8M model with a 1k context and twenty RL steps of 128 games. Chosen on
    # validation (each layout's held-out train games, 100 played 3 times, before -> after RL):
    # - own stage: 33.0% [27.9, 38.5] -> 50.3% [44.7, 56.0];
    # - alongside, as a sixth task of this job (its model, 120 demonstrations a task, its ten
    #   RL steps of 4 groups of 4): 2.0% [0.9, 4.3] -> 1.3% [0.5, 3.4]. 93% of its games end
    #   on a taken cell or a malformed call: the scratch model does not learn the move format
    #   from 120 games among 600 longer demonstrations, and RL kept 0-2 game groups a step
    #   (the rest without reward variance). Its job took 28.8 min, the game stage 18.6 alone.
    c.game_stage = True
    c.game = local_tictactoe.game_config(agentbench_config(mode), fast=mode == "fast")
    return c


def agentbench_config(mode: str = "") -> ml_collections.ConfigDict:
    """The five AgentBench-FC tasks; `mode` "fast" runs every stage in a few seconds (CI)."""
    c = ml_collections.ConfigDict()
    c.run_dir = "runs/local"
    c.seed = 0
    # Who plays the RL episodes: "agent_loop" (rollout/agent_loop.py) or "openai_agent" (an
    # agent program over the OpenAI server, configs/local_openai_agent.py).
    c.rollouts = "agent_loop"
    c.env = env_config()

    c.model = policy_lib.default_config()

    # 120 per task seen once beat 40 seen three times at the same ~450 SFT steps (validation
    # first calls well formed, 10 per task: 35/50 vs 29/50; docs/warm_start.md). Neither meets
    # the 90%: the model is under-trained, not short of context or tokens.
    c.demos = dict(per_task=120, split="train", max_tokens=4096)

    c.sft = sft_stage.default_config()
    c.sft.epochs = 1
    # Many small steps: a model trained from scratch gains more from updates than from batch.
    # Probe (held-out demonstrations 40..59, 40 per task for training, same compute): 107 steps
    # of 4k tokens at lr 3e-3 -> no valid first tool call on any task; 450 steps of ~1k tokens
    # at lr 2e-3 -> first calls well-formed with the right tool on 40-100% per task.
    c.sft.tokens_per_step = 1024
    c.sft.tokens_per_micro = 2048
    c.sft.seq_buckets = (1024, 1536, 2560, 4096)  # db/os ~800, alfworld ~1150, kg ~1470 tokens
    c.sft.optimizer.learning_rate = 2e-3
    c.sft.cache_dir = ""  # warm-started policies by config hash; "" = the agentrl_jax cache

    c.rl = rl_stage.default_config()
    c.rl.pipeline.update(steps=10, groups_per_step=4, group_size=4, rollout_workers=8,
                         max_staleness=2, stale_policy_ratio=0.25, stale_every=10)
    # The levers (off in the paper's configs): groups without reward variance are replaced
    # (at most 3x the groups a step trains are drawn), and draws prefer train indices whose
    # running pass rate is strictly between 0 and 1.
    c.rl.pipeline.update(dynamic_sampling=True, max_draws_per_step=12)
    c.rl.pipeline.curriculum.update(enabled=True, prefer=0.5, window=4)
    # The incomplete-episode penalty only in groups that earned a reward: with it everywhere,
    # 5 RL steps from this warm start took DB's validation episodes from 55% to 80% answered
    # (all wrongly, in 4.2 turns against 5.3); gated, a trivially wrong answer no longer beats
    # an attempt that runs out of turns (docs/warm_start.md).
    c.rl.advantages.penalty_needs_reward = True
    c.rl.trainer.optimizer.update(learning_rate=3e-4, max_grad_norm=1.0)
    c.rl.trainer.seq_buckets = (512, 1024, 2048, 4096)
    c.rl.trainer.tokens_per_micro = 8192
    # 320 new tokens hold every oracle turn (OS's first turns reach 276 tokens; 38 of 400 are
    # over 128, so a cap of 128 alone would cut ~10% of OS first calls short).
    c.rl.limits.update(max_turns=8, max_context_tokens=4096, max_new_tokens=320)
    # Prompts are cut into chunks of these (EngineConfig.prefill_buckets): a turn's new tokens
    # are mostly under 350, and 2,048-token calls cost 1.75x a 512's per position
    # (benchmarks/probes/prefill_plan.py). A call computes at most 2,048 positions: 4 rows of 2,048
    # needed 5.5 GB of attention temporaries at SmolLM2's 30 layers.
    # A decode call reads its rows' context up to one of these widths; the engine splits the
    # running rows into calls by context (EngineConfig.decode_call_tokens), so widths every 512
    # tokens save reads: decode 644 -> 388 s of the main job against (1024, 2048) in one call
    # (docs/performance.md), for 12 more decode and 30 more prefill shapes to compile.
    c.rl.engine.update(max_batch=32, num_pages=2048, max_context=4096,
                       prefill_buckets=(32, 128, 512), max_prefill_tokens=2048,
                       context_buckets=(512, 1024, 1536, 2048, 3072), batch_buckets=(4, 8, 16))
    c.rl.checkpoint.every = 5

    # The evaluation protocol (agentrl_jax/evaluation/protocol.py): `per_task` test indices
    # spread evenly over each test split, the same before and after RL, for reporting; the
    # validation slice (`validation_per_task` held-out train indices, never drawn in RL) for
    # decisions, evaluated in the job with `validate=True`.
    c.eval = dict(per_task=protocol.TEST_PER_TASK, validation_per_task=protocol.VALIDATION_PER_TASK,
                  validate=False, temperature=protocol.TEMPERATURE, runs=1, concurrency=32,
                  before_rl=True)

    if mode == "fast":  # every stage, a few seconds each: what CI runs
        c.run_dir = "runs/local_fast"
        c.demos.per_task = 4
        c.model.vocab_size = 512
        c.model.scratch.update(hidden_size=64, intermediate_size=128, num_layers=2, num_heads=2,
                               num_kv_heads=1, head_dim=32)
        c.sft.epochs = 1
        c.sft.seq_buckets = c.rl.trainer.seq_buckets = (4096,)   # one shape: one compilation
        c.sft.tokens_per_step = c.sft.tokens_per_micro = c.rl.trainer.tokens_per_micro = 4096
        c.rl.pipeline.update(steps=2, groups_per_step=2, group_size=2, rollout_workers=3,
                             max_draws_per_step=4)
        c.rl.limits.update(max_turns=3, max_new_tokens=24)
        c.rl.engine.update(max_batch=8, num_pages=1024, batch_buckets=(8,),
                           prefill_buckets=(512,), context_buckets=(4096,))
        c.rl.checkpoint.every = 1
        c.eval.per_task = 1
        c.eval.validation_per_task = 1
    elif mode:
        raise ValueError(f"unknown mode {mode!r} (known: fast)")
    return c
