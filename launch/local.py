"""The main job on one machine: environments, warm start, async multi-task RL, evaluation.

    python -m launch.local [--config=configs/local_default.py[:fast]] [--config.KEY=VALUE ...]

The stages (demonstrations, warm start, evaluation, RL, evaluation, report) and how a run
resumes are `agentrl_jax/experiment/job.py`'s; the environments are a fleet started here
(`environments/fleet.py`: a controller and, per task, a train- and a test-split worker, each in
its own sandbox) or `env.controller_url`, any AgentRL-compatible fleet. Which indices are
evaluated and held out: `agentrl_jax/evaluation/protocol.py`.

With `game_stage` (the default's), the same stages then run again for tic-tac-toe
(`config.game`, configs/local_tictactoe.py) under RUN_DIR/tictactoe: a game a small model
masters, so that the run shows RL making its agent better.

Metrics: RUN_DIR/metrics.jsonl and TensorBoard (`tensorboard --logdir RUN_DIR/tensorboard`).
"""

from __future__ import annotations

import pathlib

from absl import app
from ml_collections import config_flags

from agentrl_jax import compile_cache, hostmem, stage_clock
from agentrl_jax.experiment import job
from agentrl_jax.experiment.deployment import Environments
from environments import fleet
from launch import process

REPO_ROOT = pathlib.Path(__file__).resolve().parent.parent
_CONFIG = config_flags.DEFINE_config_file(
    "config", str(REPO_ROOT / "configs" / "local_default.py"), "run configuration")
ENVIRONMENTS = Environments(prepare=fleet.prepare_task_data, serve=fleet.serve_tasks)


def main(argv: list[str]) -> None:
    process.begin(argv)
    compile_cache.enable()   # compiled programs reused across runs (agentrl_jax/compile_cache.py)
    stage_clock.from_environment()   # AGENTRL_JAX_STAGE_CLOCK=PATH: the stages' split
    hostmem.keep_freed_memory()  # the warm start's buffers stay mapped (agentrl_jax/hostmem.py)
    config = _CONFIG.value
    job.run_job(config, ENVIRONMENTS)
    if config.get("game_stage"):
        job.run_job(job.game_stage_config(config), ENVIRONMENTS)


if __name__ == "__main__":
    app.run(main)
