"""`launch.eval`'s settings: which policy is evaluated, on which tasks and indices, and how.

    python -m launch.eval --config.checkpoint=runs/local                      # this config
    python -m launch.eval --config.checkpoint=runs/local --config.eval.per_task=40
    python -m launch.eval --config.checkpoint=smollm2-135m-instruct \\
        "--config.env.tasks=('db','kg')" --config.eval.runs=3

A key that is None here is taken from the evaluated run's `config.json` (the same key there)
when `checkpoint` names a `launch.local` run directory, so a run is evaluated as it was
trained; otherwise from the default named beside it. The defaults of the protocol (indices,
temperature) are `agentrl_jax/evaluation/protocol.py`'s.
"""

from __future__ import annotations

import ml_collections
from ml_collections.config_dict import placeholder

from agentrl_jax.evaluation import protocol


def get_config() -> ml_collections.ConfigDict:
    c = ml_collections.ConfigDict()
    # Required: an HF model directory (weights + tokenizer), a model-zoo name, or a
    # `launch.local` run directory.
    c.checkpoint = ""
    c.step = placeholder(int)  # with a run directory: this RL checkpoint's parameters
    #                            (None: final_model, else the latest checkpoint)
    c.out = ""  # "": RUN_DIR/eval_final or RUN_DIR/eval_step_N for a run, else runs/eval
    c.name = "eval"  # file stem of the outputs (NAME.json, NAME.md)
    c.seed = 0  # seeds the episodes' sampling

    c.env = ml_collections.ConfigDict(dict(
        controller_url="",  # an AgentRL-compatible controller; "" starts a fleet here
        tasks=placeholder(tuple),  # None: the run's env.tasks, else AgentBench-FC's
        sandbox=True,  # each started worker in its own bubblewrap sandbox
        allow_root_fallback=False,  # not host root: the OS task on the seeded root, not refused
        concurrency=64,  # episodes per started worker
    ))

    c.model = ml_collections.ConfigDict(dict(
        parser=placeholder(str),  # tool-call format; None: the run's, else "hermes"
    ))

    c.eval = ml_collections.ConfigDict(dict(
        # "test": per_task indices spread evenly over `split`; "validation": the held-out
        # slice of the run's train split that RL never draws.
        subset="test",
        split="test",
        # None: the run's eval.per_task (or eval.validation_per_task), else every test index
        # (or protocol.VALIDATION_PER_TASK validation indices).
        per_task=placeholder(int),
        runs=3,  # passes over each index, k
        temperature=protocol.TEMPERATURE,
        concurrency=32,  # episodes in flight
    ))

    # The episode limits and the sampling engine's size and prefix cache; None: the run's, else
    # `rl_stage.default_config()`'s.
    c.rl = ml_collections.ConfigDict(dict(
        limits=dict(max_turns=placeholder(int), max_context_tokens=placeholder(int),
                    max_new_tokens=placeholder(int)),
        engine=dict(max_batch=placeholder(int), num_pages=placeholder(int),
                    prefix_cache=placeholder(bool),  # False: every prompt prefilled whole
                    # padded tokens of one prefill call, the engine's memory peak (0: no cap)
                    max_prefill_tokens=placeholder(int)),
    ))
    return c
