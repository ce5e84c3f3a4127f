"""The run directory: stage markers that survive a restart, a changed config refused (or, for a
run whose state is its checkpoints, its markers dropped), and where a bucket run writes."""

from __future__ import annotations

import json
import pathlib

import ml_collections
import pytest

from agentrl_jax.experiment.run_dir import RunDir, local_dir


def _config(steps: int) -> ml_collections.ConfigDict:
    return ml_collections.ConfigDict(dict(run_dir="runs/x", rl=dict(steps=steps)))


def test_marks_survive_a_new_process_and_a_changed_config_is_refused(tmp_path):
    run = RunDir(tmp_path / "run")
    run.check_config(_config(2))
    run.mark("rl", steps=2)
    again = RunDir(tmp_path / "run")   # the same command after a crash
    again.check_config(_config(2))
    assert again.done("rl") and again.record("rl")["steps"] == 2
    with pytest.raises(SystemExit, match="different config"):
        again.check_config(_config(3))
    assert again.done("rl")
    assert json.loads((tmp_path / "run" / "config.json").read_text())["rl"]["steps"] == 2


def test_a_run_that_resumes_from_checkpoints_starts_its_stages_again_on_a_new_config(tmp_path):
    run = RunDir(tmp_path / "run")
    run.check_config(_config(2))
    run.mark("rl", steps=2)
    run.mark("export")
    run.check_config(_config(3), restart=True)
    assert run.stages() == {}
    assert json.loads((tmp_path / "run" / "config.json").read_text())["rl"]["steps"] == 3
    run.check_config(_config(3), restart=True)   # unchanged: nothing to drop
    run.mark("rl", steps=3)
    run.check_config(_config(3), restart=True)
    assert run.done("rl")


@pytest.mark.parametrize("run_dir, log_dir, expected", [
    ("runs/a", "", "runs/a"),
    ("gs://bucket/agentrl/qwen/", "", "runs/qwen"),
    ("gs://bucket/agentrl/qwen", "/logs/q", "/logs/q"),
])
def test_a_bucket_run_writes_locally(run_dir, log_dir, expected):
    config = ml_collections.ConfigDict(dict(run_dir=run_dir, log_dir=log_dir))
    assert local_dir(config) == pathlib.Path(expected)
