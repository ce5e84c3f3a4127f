"""configs/local_openai_agent.py loads as `launch.local --config=...` loads it and selects the
served agent as the rollout source; no weights, no processes."""

import pathlib

import pytest

from agentrl_jax.experiment.job import rollout_source
from configs import local_default
from tests.support.config_files import load_config

REPO = pathlib.Path(__file__).resolve().parents[2]


def load(*overrides: str):
    return load_config(REPO / "configs" / "local_openai_agent.py", *overrides)


def test_the_config_trains_the_example_agent_on_db():
    c = load("--config.openai_agent.agents=2")
    assert c.rollouts == "openai_agent" and c.env.tasks == ("db",)
    assert c.openai_agent.agents == 2
    assert (REPO / c.openai_agent.command[1]).is_file()
    p = c.rl.pipeline
    assert (p.mode, p.rollout_workers, p.stale_policy_ratio) == ("async", 0, 0.0)
    # Everything else is the main job's fast mode.
    fast = local_default.get_config("fast")
    for section in ("model", "sft", "eval", "demos"):
        assert c[section].to_dict() == fast[section].to_dict()


def test_launch_local_selects_the_rollout_source():
    assert rollout_source(local_default.get_config(), engine=None, url="u") is None
    assert callable(rollout_source(load(), engine=None, url="http://127.0.0.1:1/api"))
    with pytest.raises(ValueError, match="rollouts must be"):
        rollout_source(load("--config.rollouts=other"), engine=None, url="u")
