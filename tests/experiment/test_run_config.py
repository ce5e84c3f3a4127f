"""The run's config: refused before any stage runs when a setting contradicts another;
otherwise resolved once (derived values computed), frozen, and written to the run directory."""

from __future__ import annotations

import json

import ml_collections
import pytest

from agentrl_jax.experiment import job, run_config
from agentrl_jax.experiment.deployment import Environments
from configs import local_default


def _never(*args):
    raise AssertionError("no stage may run")


NO_ENVIRONMENTS = Environments(prepare=_never, serve=_never)


def test_a_trainer_temperature_apart_from_the_samplers_is_refused_before_any_stage(tmp_path):
    config = local_default.get_config("fast")
    config.run_dir = str(tmp_path / "run")
    config.rl.trainer.temperature = 1.0   # the sampler draws at 0.8
    with pytest.raises(ValueError, match="trainer.temperature"):
        job.run_job(config, NO_ENVIRONMENTS)
    assert not (tmp_path / "run").exists()   # no demonstrations, no warm start, no run directory


def test_derived_values_are_computed_once_and_the_result_is_frozen():
    config = local_default.get_config("fast")
    assert config.rl.trainer.temperature is None
    resolved = run_config.resolve(config)
    assert isinstance(resolved, ml_collections.FrozenConfigDict)
    assert resolved.rl.trainer.temperature == config.rl.sampling.temperature == 0.8
    # evaluation plays at its own temperature, with RL's other sampling settings
    assert resolved.eval.sampling.temperature == config.eval.temperature
    assert resolved.eval.sampling.top_p == config.rl.sampling.top_p
    assert config.rl.trainer.temperature is None   # the launcher's config is left as it was
    with pytest.raises(AttributeError, match="immutable"):
        resolved.rl.sampling.temperature = 1.0
    assert run_config.resolve(resolved) is resolved


def test_evaluation_without_a_temperature_of_its_own_plays_at_rls():
    config = local_default.get_config("fast")
    with config.eval.unlocked():
        del config.eval["temperature"]
    assert run_config.resolve(config).eval.sampling.temperature == config.rl.sampling.temperature


def test_the_config_a_job_writes_is_the_resolved_one_its_stages_read(tmp_path):
    config = local_default.get_config("fast")
    config.run_dir = str(tmp_path / "run")
    run = job.Job(config, NO_ENVIRONMENTS)
    written = json.loads((tmp_path / "run" / "config.json").read_text())
    assert written == json.loads(run.config.to_json())
    assert written["rl"]["trainer"]["temperature"] == 0.8
    assert written["eval"]["sampling"]["temperature"] == config.eval.temperature


def test_selection_keeps_its_candidate_checkpoints_and_refuses_ones_never_saved():
    config = local_default.get_config("fast")
    config.rl.checkpoint.update(every=2, keep=1)
    config.eval.select_every = 4
    assert run_config.resolve(config).rl.checkpoint.keep_period == 4
    config.eval.select_every = 3   # step 3 has no checkpoint
    with pytest.raises(ValueError, match="multiple of rl.checkpoint.every"):
        run_config.resolve(config)
    config.eval.select_every = 4
    config.rl.checkpoint.keep_period = 8   # would delete the checkpoint of step 4
    with pytest.raises(ValueError, match="keep_period"):
        run_config.resolve(config)


def test_selection_is_refused_where_checkpoints_are_not_full_parameters():
    config = local_default.get_config("fast")
    config.eval.select_every = 1
    config.rl.trainer.lora.enabled = True
    with pytest.raises(ValueError, match="LoRA"):
        run_config.resolve(config)
