"""The RL pipeline end to end with `trainer.lora`: adapters train, every sync carries adapters
alone with verified delivery, and the stale policy is another adapter over the same base."""

import asyncio

import jax
import numpy as np
from flax import nnx
from jax.sharding import Mesh

from agentrl_jax.controller.client import ControllerClient
from agentrl_jax.data import TaskStream
from agentrl_jax.models.config import ModelConfig
from agentrl_jax.models.decoder import Decoder
from agentrl_jax.pipeline import runner
from agentrl_jax.rl import advantages, train_step
from agentrl_jax.rollout.agent_loop import AgentSpec, EpisodeLimits
from agentrl_jax.rollout.cross_policy import PolicyMix
from agentrl_jax.sampling import EngineConfig, SamplingEngine, SamplingParams
from agentrl_jax.sampling.adapter_engine import AdapterSamplingEngine
from agentrl_jax.tree_digest import tree_digest


def test_lora_pipeline_trains_adapters_and_serves_both_policies(fleet, tokenizer):
    cfg = ModelConfig.tiny("llama", vocab_size=len(tokenizer), hidden_size=32,
                           intermediate_size=64, num_layers=1, num_heads=2, num_kv_heads=1)
    model = Decoder(cfg, rngs=nnx.Rngs(0))
    devices = jax.devices()
    trainer_mesh = Mesh(np.array(devices[2:4]).reshape(1, 2, 1), ("data", "fsdp", "tensor"))
    tcfg = train_step.default_config()
    tcfg.seq_buckets, tcfg.tokens_per_micro = (512,), 1024
    tcfg.optimizer.learning_rate = 1e-2
    tcfg.lora.update(enabled=True, rank=4, alpha=8.0)
    trainer = train_step.Trainer(model, tcfg, trainer_mesh)
    served_model = train_step.with_trainer_adapters(model, tcfg)
    engine = AdapterSamplingEngine(SamplingEngine(
        served_model, EngineConfig(max_batch=8, page_size=16, num_pages=256, max_context=512,
                                   prefill_buckets=(256,), context_buckets=(512,),
                                   batch_buckets=(8,), steps_per_sync=4)), served_model)
    pcfg = runner.default_config()
    pcfg.update(mode="async", steps=4, groups_per_step=2, group_size=2, rollout_workers=3,
                max_staleness=1, stale_policy_ratio=0.5, stale_every=2)
    agent = AgentSpec(
        tokenizer=tokenizer, sampling=SamplingParams(temperature=1.0, max_new_tokens=12),
        limits=EpisodeLimits(max_turns=2, max_context_tokens=512, max_new_tokens=12),
        policy_mix=PolicyMix.current_and_stale(0.5))
    reports = []
    base_before = jax.device_get(trainer.frozen_params)

    async def go():
        async with ControllerClient(fleet.url, start_jitter_s=0) as client:
            stream = TaskStream({"echo": await client.get_indices("echo")}, seed=0)
            pipeline = runner.RLPipeline(
                pcfg, client=client, engine=engine, trainer=trainer, agent=agent,
                stream=stream, adv_config=advantages.default_config(), on_step=reports.append)
            state = await pipeline.run(trainer.init_state(0))
            return state, await engine.policies(), await engine.served("current")

    with engine:
        state, policies, served = asyncio.run(go())
    assert policies == {"current": 4, "stale": 4}
    assert [r.metrics["stale_refreshed"] for r in reports] == [0.0, 1.0, 0.0, 1.0]
    ids = np.concatenate([r.policy_ids[r.loss_mask > 0] for rep in reports for r in rep.rollouts])
    assert set(ids.tolist()) == {0, 1}
    for report in reports:
        for r in report.rollouts:
            sampled = r.versions[(r.loss_mask > 0) & (r.policy_ids == 0)]  # current policy
            assert sampled.size == 0 or report.step - 1 - sampled.min() <= 1
    # The sampler serves exactly the trainer's final adapters (verified), only adapters are
    # trained, and the base never changed. (The echo task gives this random model no reward,
    # so the adapters' values are not expected to move here; tests/rl checks the updates.)
    trained = jax.device_get(state.params)
    assert set(trained) == {"layers"} and all("_lora_" in k for k in trained["layers"])
    assert served == (4, tree_digest(trained))
    assert all(np.isfinite(r.metrics["grad_norm"]) for r in reports)
    jax.tree.map(np.testing.assert_array_equal, jax.device_get(trainer.frozen_params),
                 base_before)
