"""The main job with its RL episodes played by an agent written against the `openai` client.

    python -m launch.local --config=configs/local_openai_agent.py

Every stage is the main job's in its fast mode (the tiny from-scratch model, a few steps), on
the DB task alone, except who plays the RL episodes: not the project's agent loop but
examples/openai_agent/agent.py, run once per episode as its own process. It talks to the
policy through the OpenAI-compatible server and to the task through the task gateway, both
served on loopback by the training process over the pipeline's own engine
(agentrl_jax/serving/agent_rollouts.py), so every weight version trained is what the agent
samples next, and the batches hold exactly the tokens it was given. The reward is the DB
grader's, through the gateway; the agent cannot give its own (docs/serving.md, "Training a
black-box agent"). Evaluation before and after RL still plays the test indices with the
project's loop, so the two runs' results compare. A few minutes on a 2-core CPU. No modes.
"""

from __future__ import annotations

import ml_collections

from agentrl_jax.serving import agent_rollouts
from configs import local_default


def get_config() -> ml_collections.ConfigDict:
    c = local_default.agentbench_config("fast")
    c.run_dir = "runs/local_openai_agent"
    c.env.tasks = ("db",)
    c.rollouts = "openai_agent"
    c.openai_agent = agent_rollouts.default_config()
    c.openai_agent.agents = 4  # agent processes at once
    # Only the served agent plays (no in-process rollout workers); it samples the trained
    # policy alone (the server serves no stale snapshot), and every group trains (rewards
    # without variance give zero advantages, but a finite loss and a new weight version).
    c.rl.pipeline.update(rollout_workers=0, stale_policy_ratio=0.0, dynamic_sampling=False,
                         steps=3, groups_per_step=2, group_size=2)
    return c
