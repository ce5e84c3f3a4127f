"""What the run configs resolve to, for the settings whose defaults live in dataclasses.

`rl.engine` and `rl.limits` take their fields and defaults from `EngineConfig` and
`EpisodeLimits` (`agentrl_jax.dataclass_config`). A change of a dataclass default must not move
a pod's or the main job's sampler or episodes unnoticed: these are the values every config
resolved to before the sections were built from the dataclasses, written out in full.
"""

import dataclasses
import importlib

import pytest

from agentrl_jax.dataclass_config import dataclass_from
from agentrl_jax.rollout.agent_loop import EpisodeLimits
from agentrl_jax.sampling import EngineConfig
from configs import local_default
from configs.agentbench_fc import ablations

# Settings every AgentBench-FC model file shares (base.py and rl_stage's defaults).
POD_ENGINE = dict(page_size=16, max_context=8192, prefill_buckets=(256, 1024, 4096, 8192),
                  prefill_batch_buckets=(1, 4), max_prefill_tokens=8192, prefill_call_tokens=1024,
                  context_buckets=(1024, 2048, 4096, 8192), decode_call_tokens=-1,
                  steps_per_sync=8,
                  in_flight="finish", max_stop_ids=8, seed=0, prefix_cache=True,
                  compute_dtype="bfloat16")
POD_LIMITS = dict(max_turns=20, max_context_tokens=8192, max_new_tokens=1024)
POD_MODELS = {   # model file: (max_batch, num_pages, batch_buckets)
    "qwen25_3b": (128, 32768, (1, 8, 32, 64, 128)),
    "qwen25_7b": (64, 16384, (1, 8, 32, 64)),
    "qwen25_14b": (64, 12288, (1, 8, 32, 64)),
    "qwen25_32b": (32, 6144, (1, 8, 32)),
    "glm4_9b": (64, 16384, (1, 8, 32, 64)),
}
LOCAL_ENGINE = dict(max_batch=32, page_size=16, num_pages=2048, max_context=4096,
                    prefill_buckets=(32, 128, 512), prefill_batch_buckets=(1, 4),
                    max_prefill_tokens=2048, prefill_call_tokens=32,
                    context_buckets=(512, 1024, 1536, 2048, 3072),
                    decode_call_tokens=-1, batch_buckets=(4, 8, 16), steps_per_sync=8,
                    in_flight="finish", max_stop_ids=8, seed=0, prefix_cache=True,
                    compute_dtype=None)
LOCAL_LIMITS = dict(max_turns=8, max_context_tokens=4096, max_new_tokens=320)


def _resolved(config):
    return (dataclasses.asdict(dataclass_from(config.rl.engine, EngineConfig)),
            dataclasses.asdict(dataclass_from(config.rl.limits, EpisodeLimits)))


@pytest.mark.parametrize("model", sorted(POD_MODELS))
def test_agentbench_fc_models(model):
    max_batch, num_pages, batch_buckets = POD_MODELS[model]
    config = importlib.import_module(f"configs.agentbench_fc.{model}").get_config()
    assert _resolved(config) == (
        dict(POD_ENGINE, max_batch=max_batch, num_pages=num_pages, batch_buckets=batch_buckets),
        POD_LIMITS)


@pytest.mark.parametrize("ablation", ablations.ablations())
def test_agentbench_fc_ablations_keep_their_models_engine_and_limits(ablation):
    max_batch, num_pages, batch_buckets = POD_MODELS[ablations.DEFAULT_MODEL]
    assert _resolved(ablations.get_config(ablation)) == (
        dict(POD_ENGINE, max_batch=max_batch, num_pages=num_pages, batch_buckets=batch_buckets),
        POD_LIMITS)


def test_local_default():
    assert _resolved(local_default.get_config()) == (LOCAL_ENGINE, LOCAL_LIMITS)


def test_local_default_fast():
    assert _resolved(local_default.get_config("fast")) == (
        dict(LOCAL_ENGINE, max_batch=8, num_pages=1024, prefill_buckets=(512,),
             context_buckets=(4096,), batch_buckets=(8,)),
        dict(LOCAL_LIMITS, max_turns=3, max_new_tokens=24))
