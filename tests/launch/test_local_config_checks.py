"""launch.local refuses a config it cannot train correctly before any stage runs."""

from __future__ import annotations

import pytest

from configs import local_default
from launch import local


def test_a_trainer_temperature_apart_from_the_samplers_is_refused_before_any_stage(tmp_path):
    config = local_default.get_config("fast")
    config.run_dir = str(tmp_path / "run")
    config.rl.trainer.temperature = 1.0   # the sampler draws at 0.8
    with pytest.raises(ValueError, match="trainer.temperature"):
        local.run_job(config)
    assert not (tmp_path / "run").exists()   # no demonstrations, no warm start, no run directory
