"""Tic-tac-toe against a random opponent, alone, on the main job's whole stack.

    python -m launch.local --config=configs/local_tictactoe.py

Controller, sandboxed worker, warm start on a uniform legal-move player's games (the format of
a move, no strategy), sampling engine, asynchronous pipeline, GRPO, trainer, weight sync, and
the test split's evaluation before and after RL (200 games).

Not yet a run that learns. Measured on the 2-core CPU (0.8M parameters):
- With these settings plus `sft.context_loss_weight=1.0`, `sft.epochs=5`, 2,048 tokens a warm
  start step and RL at lr 3e-4 (demos 9 s, warm start 7.4 min, evaluations 32 and 16 s, ten RL
  steps 5.6 min): test success 8.5% [5.4, 13.2] before RL, 8.0% [5.0, 12.6] after, paired
  -0.5 points [-5.2, 4.2]. 84% of the games before RL end on a taken cell.
- The warm-started model's first move does not depend on the board at all (the same
  distribution over the nine cells on every board) after 112, 168 (context loss 0.5), 396
  (1,024-token steps) or 492 warm start steps: the demonstrator's uniform choice among the
  legal cells is one token in ~27 of a move, and its gain over the cells' marginal is ~0.6
  nats, too weak a signal to start reading the board.
- RL from there: at lr 1e-3 the games collapsed to 100% invalid moves within four steps; at
  1e-4 and 3e-4 success stayed at 5-8% a step. With the incomplete-episode penalty in every
  group (`rl.advantages.penalty_needs_reward=False`), 3e-4: invalid moves 84% -> 77% and
  success 5% -> 13% by step 11 (noisy; the run was stopped there).
- The same SFT trainer learns to copy a digit from a fixed offset 250 tokens into a row after
  a ~150-step plateau, so the trainer can learn to read a fixed position.
"""

from __future__ import annotations

import ml_collections

from configs import local_default

TASK = "tictactoe"


def game_config(c: ml_collections.ConfigDict) -> ml_collections.ConfigDict:
    """`c` set up for the game alone."""
    c.env.tasks = (TASK,)
    c.demos.update(per_task=400, max_tokens=1024)
    c.model.vocab_size = 512
    c.model.scratch.update(hidden_size=128, intermediate_size=384, num_layers=4, num_heads=4,
                           num_kv_heads=2, head_dim=32)
    c.sft.epochs = 2
    c.sft.tokens_per_step = 4096
    c.sft.tokens_per_micro = 8192
    c.sft.seq_buckets = (512, 1024)
    c.sft.optimizer.learning_rate = 3e-3
    c.rl.pipeline.update(steps=20, groups_per_step=16, group_size=8, rollout_workers=24,
                         max_staleness=2, dynamic_sampling=True, max_draws_per_step=32)
    c.rl.pipeline.curriculum.enabled = False
    c.rl.advantages.penalty_needs_reward = True
    c.rl.trainer.optimizer.update(learning_rate=1e-3, max_grad_norm=1.0)
    c.rl.trainer.seq_buckets = (512, 1024)
    c.rl.trainer.tokens_per_micro = 16384
    c.rl.limits.update(max_turns=6, max_context_tokens=1024, max_new_tokens=32)
    c.rl.engine.update(max_batch=64, num_pages=1024, max_context=1024,
                       prefill_buckets=(32, 128, 512), max_prefill_tokens=2048,
                       context_buckets=(512, 1024), batch_buckets=(8, 32, 64))
    c.rl.checkpoint.every = 5
    c.eval.per_task = 200
    c.eval.validation_per_task = 100
    c.eval.concurrency = 64
    return c


def get_config(mode: str = "") -> ml_collections.ConfigDict:
    c = game_config(local_default.get_config())
    c.run_dir = "runs/local_tictactoe" + (f"_{mode}" if mode else "")
    if mode:
        raise ValueError(f"unknown mode {mode!r}")
    return c
