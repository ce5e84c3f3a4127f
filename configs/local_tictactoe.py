"""Tic-tac-toe against a random opponent, alone, on the main job's whole stack.

    python -m launch.local --config=configs/local_tictactoe.py

Controller, sandboxed worker, warm start on a uniform legal-move player's games (the format of
a move and a note of the free cells, no strategy), sampling engine, asynchronous pipeline,
GRPO, trainer, weight sync, and the test split's evaluation before and after RL (200 games).

Measured on the 2-core CPU (AMD EPYC, nothing else running; 0.8M parameters), one run of these
settings: test success **28.0% [22.2, 34.6] before RL, 50.0% [43.1, 56.9] after, paired +22.0
points [13.3, 30.7]** (demonstrations 44 s, warm start 6.4 min for 1,251 steps, evaluations 55
and 20 s, twenty RL steps 10.2 min). Games ending on a taken cell: 26% -> 16%. Where a move
won on the spot, the agent took it in 34% of such positions before RL (chance) and 49% after;
where it had to block, 31% before and after (chance): RL had learned to finish lines first.

How the settings were chosen (held-out games of the train split, legal mass = the warm-started
model's probability on legal cells at the move, teacher-forced; chance is 0.57):
- Demonstrations without the free-cells note: the uniform choice among the legal cells is one
  token a move worth ~0.6 nats over the cells' marginal. Legal mass stayed at chance for 400
  steps of 4,096 tokens and reached 0.61 after 1,000 steps of 1,024; the whole-stack run's
  model ended 80% of its test games on a taken cell and RL left success at 8-12% a step.
- Small steps (1,024 tokens at lr 2e-3, as the AgentBench default) beat large ones per CPU
  second; a context loss of 1.0 (the board cells of each reply predicted from the last board)
  took legal mass to 0.74 by step 1,000; the free-cells note, to 0.83 by step 900. A model of
  hidden size 256 was no faster per step and twice the cost.
- RL at lr 1e-3 from the board-blind warm start collapsed to invalid moves in four steps; from
  this one it swung (invalid moves 27% -> 74% of a step's games by step 5, back to 20% by step
  8). 5e-4 rose from 27-36% success a step (steps 1-4) to 39-49% (steps 13-18).
"""

from __future__ import annotations

import ml_collections

from configs import local_default

TASK = "tictactoe"


def game_config(c: ml_collections.ConfigDict, fast: bool = False) -> ml_collections.ConfigDict:
    """`c` set up for the game alone; `fast`: every stage in seconds, as the main job's CI run."""
    c.env.tasks = (TASK,)
    c.demos.update(per_task=3000, max_tokens=1024)
    c.model.vocab_size = 512
    c.model.scratch.update(hidden_size=128, intermediate_size=384, num_layers=4, num_heads=4,
                           num_kv_heads=2, head_dim=32)
    c.sft.epochs = 1
    c.sft.tokens_per_step = 1024
    c.sft.tokens_per_micro = 2048
    c.sft.seq_buckets = (512, 1024)
    c.sft.context_loss_weight = 1.0
    c.sft.optimizer.learning_rate = 2e-3
    c.rl.pipeline.update(steps=20, groups_per_step=16, group_size=8, rollout_workers=24,
                         max_staleness=2, dynamic_sampling=True, max_draws_per_step=32)
    c.rl.pipeline.curriculum.enabled = False
    c.rl.advantages.penalty_needs_reward = True
    c.rl.trainer.optimizer.update(learning_rate=5e-4, max_grad_norm=1.0)
    c.rl.trainer.seq_buckets = (512, 1024)
    c.rl.trainer.tokens_per_micro = 16384
    c.rl.limits.update(max_turns=6, max_context_tokens=1024, max_new_tokens=48)
    c.rl.engine.update(max_batch=64, num_pages=1024, max_context=1024,
                       prefill_buckets=(32, 128, 512), max_prefill_tokens=2048,
                       context_buckets=(512, 1024), batch_buckets=(8, 32, 64))
    c.rl.checkpoint.every = 5
    c.eval.per_task = 200
    c.eval.validation_per_task = 100
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
