"""RL makes the agent better at tic-tac-toe, through the whole stack, and the test can fail.

The main job's game stage (configs/local_tictactoe.py) runs as the launcher runs it: the real
controller and sandboxed worker, the warm start, the sampling engine, the asynchronous pipeline,
GRPO with task advantage normalisation, the trainer and the weight sync, the final policy chosen
among the checkpoints of steps 5, 10, 15 and 20 on 100 validation games (`eval.select_every`),
evaluated on 200 test games before and after RL. Two arms from the same cached warm start:

- learning: the config's RL; success after RL must beat success before, judged by the paired
  difference's 95% interval (its lower end above 0);
- control: the same run at learning rate 0; its paired interval must hold 0 (the weights never
  change, so the games replay exactly and the difference is 0). Two RL steps: at learning rate
  0 twenty would end with the same weights, and only take ten minutes longer.

Seeds are fixed (samples, opponents, sampling, initialisation), so the warm start and the
evaluation before RL repeat exactly (28.0% of the test games); RL's asynchronous order does not.
Without gradient clipping that acts (a global norm of 1.0 against steps of 0.05-0.3), runs of
the learning arm read +22.0, +19.5, +24.5, +26.5 and once +4.5 points [-4.0, 13.0], a run whose
last step left 46% of the test games ending on an invalid move; clipped at 0.1, runs read
+25.5 [16.2, 34.8], +29.5 [20.9, 38.1], +18.0 [9.6, 26.4], +31.0, +26.5 and once -3.0
[-11.1, +5.1] (this test, in CI) on the 2-core CPU, each evaluating the last step's policy. The
policy's success swings by 10-20 points from one step to the next (on the validation games of
one run: 0.32, 0.43, 0.33 at steps 5-7; 0.41, 0.29, 0.44 at steps 12-14), so the config now
evaluates the checkpoint best on validation, which the test games never see.

Sabotage check, run once by hand: the learning arm with the advantages' sign flipped (`return
-adv, weights` in `rl.advantages.compute_advantages`) went from 28.0% to 0.0% of the test games
won, every game ending on an invalid move: paired -28.0 points [-34.3, -21.7], so `low > 0`
fails. No timings are asserted. About 20 minutes for both arms (19.6 in a fresh clone): `slow`,
run by the README's test command (and so by CI) after the default suite.
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

import pytest

REPO_ROOT = pathlib.Path(__file__).resolve().parents[2]


def run_game(run_dir: pathlib.Path, sft_cache: pathlib.Path, *overrides: str) -> dict:
    """One game-alone job in a subprocess; its paired before/after difference on the test
    games (`paired_difference.json`)."""
    env = dict(os.environ)
    env.pop("XLA_FLAGS", None)   # the launcher sees this machine's one CPU device
    argv = [sys.executable, "-m", "launch.local", "--config=configs/local_tictactoe.py",
            f"--config.run_dir={run_dir}", f"--config.sft.cache_dir={sft_cache}", *overrides]
    log = run_dir.with_suffix(".log")
    with open(log, "wb") as out:
        done = subprocess.run(argv, cwd=REPO_ROOT, env=env, stdout=out,
                              stderr=subprocess.STDOUT, timeout=3600)
    assert done.returncode == 0, log.read_text()[-4000:]
    return json.loads((run_dir / "paired_difference.json").read_text())["tasks"]["tictactoe"]


@pytest.mark.slow
@pytest.mark.timeout(5400)
def test_rl_improves_the_game_and_a_zero_learning_rate_does_not(tmp_path):
    sft_cache = tmp_path / "sft"
    learning = run_game(tmp_path / "learning", sft_cache)
    control = run_game(tmp_path / "control", sft_cache,
                       "--config.rl.trainer.optimizer.learning_rate=0.0",
                       "--config.rl.pipeline.steps=2")
    assert learning["n"] == control["n"] == 200
    assert learning["low"] > 0, learning
    assert control["low"] <= 0 <= control["high"], control
