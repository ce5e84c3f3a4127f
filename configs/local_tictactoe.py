"""Tic-tac-toe against a random opponent, alone, on the main job's whole stack.

The main job's game stage (`game` in configs/local_default.py) run as a job of its own:
controller, sandboxed worker, a warm start on a uniform legal-move player's games (the format
of a move and a note of the free cells, no strategy), sampling engine, asynchronous pipeline,
GRPO, trainer, weight sync, and the test split's 200 games evaluated before and after RL.
A 0.8M-parameter model sized for a 2-core CPU; its results and minutes: the README,
"Tic-tac-toe: RL makes the agent better".

    python -m launch.local --config=configs/local_tictactoe.py
    python -m launch.local --config=configs/local_tictactoe.py:fast   # every stage in seconds

Modes: "" (this config) and "fast" (a tiny model and a few steps, as the main job's CI run).
"""

from __future__ import annotations

import ml_collections

from configs import local_default

TASK = "tictactoe"


def game_config(c: ml_collections.ConfigDict, fast: bool = False) -> ml_collections.ConfigDict:
    """`c` set up for the game alone; `fast`: every stage in seconds, as the main job's CI run."""
    c.env.tasks = (TASK,)
    # Demonstrations: games of the uniform legal-move player (per task; longest kept in tokens).
    c.demos.update(per_task=3000, max_tokens=1024)
    c.model.vocab_size = 512
    # 0.8M parameters: hidden size 256 learned no faster per step, at twice the cost.
    c.model.scratch.update(hidden_size=128, intermediate_size=384, num_layers=4, num_heads=4,
                           num_kv_heads=2, head_dim=32)
    c.sft.epochs = 1
    # Small steps (tokens a step) at a high rate, as the AgentBench default: more progress per
    # CPU second than large ones.
    c.sft.tokens_per_step = 1024
    c.sft.tokens_per_micro = 2048
    c.sft.seq_buckets = (512, 1024)
    # The loss on the context's tokens too (each reply's board predicted from the last one):
    # it raised the model's probability on legal cells (chance 0.57) to 0.74 by step 1,000.
    c.sft.context_loss_weight = 1.0
    c.sft.optimizer.learning_rate = 2e-3
    # Twenty steps of 16 groups of 8 games (128 games a step), with dynamic sampling.
    c.rl.pipeline.update(steps=20, groups_per_step=16, group_size=8, rollout_workers=24,
                         max_staleness=2, dynamic_sampling=True, max_draws_per_step=32)
    c.rl.pipeline.curriculum.enabled = False
    c.rl.advantages.penalty_needs_reward = True
    # 5e-4: at 1e-3 the share of invalid moves swung (27% -> 74% -> 20% within eight steps).
    # Gradients clipped at 0.1 (global norm), about 1.4x this model's median step norm (0.07):
    # unclipped, single steps of 0.3 came with such swings, and a run could end on one.
    c.rl.trainer.optimizer.update(learning_rate=5e-4, max_grad_norm=0.1)
    c.rl.trainer.seq_buckets = (512, 1024)
    c.rl.trainer.tokens_per_micro = 16384
    # Turns (moves), an episode's context and a move's new tokens (tokens).
    c.rl.limits.update(max_turns=6, max_context_tokens=1024, max_new_tokens=48)
    c.rl.engine.update(max_batch=64, num_pages=1024, max_context=1024,
                       prefill_buckets=(32, 128, 512), max_prefill_tokens=2048,
                       context_buckets=(512, 1024), batch_buckets=(8, 32, 64))
    c.rl.checkpoint.every = 5
    c.eval.per_task = 200  # test games, the same before and after RL
    c.eval.validation_per_task = 100  # held-out train games, for decisions
    # The final policy: the checkpoint of steps 5, 10, 15, 20 best on the validation games.
    # The policy's success swings by 10-20 points from one step to the next, and a run that
    # ended on a low swing read -3.0 points [-11.1, +5.1] on the test games.
    c.eval.select_every = 5
    c.eval.concurrency = 64
    if fast:
        c.demos.per_task = 8
        c.model.scratch.update(hidden_size=64, intermediate_size=128, num_layers=2,
                               num_heads=2, num_kv_heads=1)
        c.rl.pipeline.update(steps=2, groups_per_step=2, group_size=2, rollout_workers=3,
                             max_draws_per_step=4)
        c.rl.engine.update(max_batch=8, batch_buckets=(8,), prefill_buckets=(512,),
                           context_buckets=(1024,))
        c.sft.seq_buckets = c.rl.trainer.seq_buckets = (1024,)
        c.eval.per_task = 2
        c.eval.validation_per_task = 1
    return c


def get_config(mode: str = "") -> ml_collections.ConfigDict:
    if mode not in ("", "fast"):
        raise ValueError(f"unknown mode {mode!r} (known: fast)")
    c = game_config(local_default.agentbench_config(mode), fast=mode == "fast")
    c.run_dir = "runs/local_tictactoe" + (f"_{mode}" if mode else "")
    return c
