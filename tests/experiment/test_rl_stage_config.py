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
