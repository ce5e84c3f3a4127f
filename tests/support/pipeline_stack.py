"""Shared support of the pipeline tests: the tiny real stack and a run's configs."""

import jax
import numpy as np
from flax import nnx
from jax.sharding import Mesh

from agentrl_jax.models.config import ModelConfig
from agentrl_jax.models.decoder import Decoder
from agentrl_jax.pipeline import runner
from agentrl_jax.rl import train_step
from agentrl_jax.rollout.agent_loop import AgentSpec, EpisodeLimits
from agentrl_jax.rollout.cross_policy import PolicyMix
from agentrl_jax.sampling import AsyncSamplingEngine, EngineConfig, SamplingEngine, SamplingParams


def make_stack(tokenizer, max_context: int = 512):
    """(engine, trainer) on a tiny model: the async engine (unstarted) and a sharded trainer,
    both for episodes of up to `max_context` tokens."""
    cfg = ModelConfig.tiny("llama", vocab_size=len(tokenizer), hidden_size=32,
                           intermediate_size=64, num_layers=1, num_heads=2, num_kv_heads=1)
    model = Decoder(cfg, rngs=nnx.Rngs(0))
    devices = jax.devices()
    # Disaggregated: the sampler on device 0, the trainer on devices 2-3, so every weight
    # sync is a transfer between meshes. (The sampler's own tensor parallelism is tested in
    # tests/sampling; on fake CPU devices it is far too slow for a pipeline run.)
    trainer_mesh = Mesh(np.array(devices[2:4]).reshape(1, 2, 1), ("data", "fsdp", "tensor"))
    engine = AsyncSamplingEngine(SamplingEngine(
        model, EngineConfig(max_batch=8, page_size=16, num_pages=max_context // 2,
                            max_context=max_context, prefill_buckets=(256,),
                            context_buckets=(max_context,), batch_buckets=(8,),
                            steps_per_sync=4)))
    tcfg = train_step.default_config()
    tcfg.seq_buckets = (max_context,)
    tcfg.tokens_per_micro = 2 * max_context
    tcfg.optimizer.learning_rate = 1e-3
    trainer = train_step.Trainer(model, tcfg, trainer_mesh)
    return engine, trainer


def pipeline_configs(tokenizer, mode, stale_ratio=0.0, steps=3, max_staleness=1, **pipeline):
    pcfg = runner.default_config()
    pcfg.update(mode=mode, steps=steps, groups_per_step=2, group_size=2, rollout_workers=3,
                max_staleness=max_staleness, stale_policy_ratio=stale_ratio, stale_every=2,
                **pipeline)
    agent = AgentSpec(
        tokenizer=tokenizer, sampling=SamplingParams(temperature=1.0, max_new_tokens=12),
        limits=EpisodeLimits(max_turns=2, max_context_tokens=512, max_new_tokens=12),
        policy_mix=PolicyMix.current_and_stale(stale_ratio))
    return pcfg, agent
