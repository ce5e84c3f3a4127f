"""The real default (`configs/local_default.py`) on a reduced budget: its warm start must write
well-formed first tool calls, so that a regression of the format shows up in tests.

Slow (`pytest -m slow`): the demonstrations and the warm start are the default's own (cached
in the agentrl_jax cache, shared with `python -m launch.local`); RL takes 0 steps, so the final
policy is the warm start, and `eval_after` plays `PER_TASK` test indices per task with it. The
assertion is on the format of each episode's first call (an offered tool, JSON arguments with
the required parameters), never on a success rate; whether it is the oracle's first tool is
printed.

The bar is the issue's (90% per task) and the current default does not meet it: its warm start
writes well-formed first calls with the oracle's tool in 20-45% of the DB, OS and KG validation
episodes (docs/warm_start.md), so this test fails until a policy that meets the bar is the
default.
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

import pytest

from configs import local_default

REPO_ROOT = pathlib.Path(__file__).resolve().parents[2]
PER_TASK = 10
WELL_FORMED = 0.9  # the bar for the first calls of every task


def _default_tasks() -> list[str]:
    return list(local_default.get_config().env.tasks)


@pytest.mark.slow
@pytest.mark.timeout(7200)
def test_the_defaults_warm_start_writes_well_formed_first_calls(tmp_path):
    run_dir = tmp_path / "run"
    argv = [sys.executable, "-m", "launch.local", f"--config.run_dir={run_dir}",
            "--config.rl.pipeline.steps=0", "--config.eval.before_rl=False",
            f"--config.eval.per_task={PER_TASK}"]
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}   # one CPU device
    log = tmp_path / "log.txt"
    with open(log, "wb") as out:
        done = subprocess.run(argv, cwd=REPO_ROOT, env=env, stdout=out, stderr=subprocess.STDOUT,
                              timeout=7200)
    assert done.returncode == 0, log.read_text()[-4000:]

    summary = json.loads((run_dir / "eval_after_first_calls.json").read_text())
    assert sorted(summary) == sorted(_default_tasks())
    assert all(row["episodes"] == PER_TASK for row in summary.values())
    well_formed = {task: row["well_formed"] for task, row in summary.items()}
    right_tool = {task: row["oracle_first_tool"] for task, row in summary.items()}
    # Which tool comes first is behaviour (the 90% target, reported here); that the
    # call is one the environment can execute is the format, asserted.
    print(f"first calls well formed: {well_formed}; with the oracle's first tool: {right_tool}")
    assert all(rate >= WELL_FORMED for rate in well_formed.values()), well_formed
