"""The RL stage's up-front config checks."""

import pytest

from agentrl_jax.experiment import rl_stage


def test_context_limit_must_fit_the_largest_training_bucket():
    config = rl_stage.default_config()
    config.trainer.seq_buckets = (512, 1024)
    config.limits.max_context_tokens = 1025  # 1024 inputs: fits exactly
    rl_stage.check_context_fits_training(config)
    config.limits.max_context_tokens = 2048
    with pytest.raises(ValueError, match="largest training bucket"):
        rl_stage.check_context_fits_training(config)


def test_rl_trains_on_the_chosen_tasks_in_served_order_and_refuses_unserved_ones():
    config = rl_stage.default_config()
    served = ["alfworld", "db", "kg", "webshop"]
    assert rl_stage.trained_tasks(config, served) == served   # empty: every served task
    config.tasks = ("webshop", "db")
    assert rl_stage.trained_tasks(config, served) == ["db", "webshop"]
    config.tasks = ("db", "os")
    with pytest.raises(ValueError, match="'os'"):
        rl_stage.trained_tasks(config, served)
