"""Weight sync. LoRA: an update carries the adapters alone, and delivery is verified: a lost or
corrupted update is detected and sent again, never served (nor trained on) silently. A pod
leader's gather placed on its sampler's devices is installed and published as it is."""

import asyncio

import jax
import numpy as np
import pytest
from flax import nnx

from agentrl_jax.models.config import ModelConfig
from agentrl_jax.models.decoder import Decoder
from agentrl_jax.parallel.mesh import make_mesh
from agentrl_jax.pipeline import weight_sync
from agentrl_jax.rl import train_step as ts
from agentrl_jax.sampling import (
    AsyncSamplingEngine,
    GenerateRequest,
    SamplingEngine,
)
from agentrl_jax.sampling.adapter_engine import AdapterSamplingEngine
from agentrl_jax.sampling.weights import weights_of
from tests.support.tiny_engine import ENGINE, GREEDY, PROMPT, trained_state


def _trainer():
    c = ts.default_config()
    c.seq_buckets, c.tokens_per_micro = (16,), 64
    c.optimizer.learning_rate = 5e-2
    c.lora.update(enabled=True, rank=4, alpha=8.0)
    model = Decoder(ModelConfig.tiny(), rngs=nnx.Rngs(0))
    return ts.Trainer(model, c, make_mesh(fsdp=2, tensor=2, devices=jax.devices()[:4]))



def _engine(trainer):
    model = trainer.model_view()
    return AdapterSamplingEngine(SamplingEngine(model, ENGINE), model)


def test_sync_sends_only_adapters_and_the_sampler_serves_the_trained_policy():
    trainer = _trainer()
    state = trained_state(trainer)
    update = weight_sync.WeightUpdate.of(1, weight_sync.snapshot(trainer, state))
    full = weight_sync.WeightUpdate.of(1, weights_of(trainer.model(state.params)))
    assert set(update.weights) == {"layers"}
    assert all("_lora_" in name for name in update.weights["layers"])
    assert update.nbytes * 5 < full.nbytes

    async def main():
        with _engine(trainer) as engine:
            updated = await weight_sync.sync_weights(engine, trainer, state, 25, stale_every=25)
            assert updated == ["current", "stale"]
            assert await engine.policies() == {"current": 25, "stale": 25}
            return await engine.generate(GenerateRequest(PROMPT, GREEDY))

    got = asyncio.run(main())
    from agentrl_jax.models import lora

    merged = lora.merged(trainer.model(jax.device_get(state.params)))
    with AsyncSamplingEngine(SamplingEngine(merged, ENGINE)) as plain:
        want = asyncio.run(plain.generate(GenerateRequest(PROMPT, GREEDY)))
    assert got.tokens == want.tokens and got.versions == [25] * 4
    np.testing.assert_allclose(got.logprobs, want.logprobs, atol=1e-4)


class FaultyTransport:
    """Between trainer and sampler: loses the first update, corrupts the second."""

    def __init__(self, engine, faults):
        self.engine, self.faults, self.seen = engine, list(faults), []

    async def __call__(self, policy, version, weights, checksum):
        fault = self.faults.pop(0) if self.faults else None
        self.seen.append((fault, dict(await self.engine.policies())))
        if fault == "lost":  # never arrives: the sampler still serves what it served
            return (await self.engine.policies()).get(policy), None
        if fault == "corrupt":
            weights = jax.tree.map(np.array, weights)
            weights["layers"]["o_proj_lora_b"].reshape(-1)[0] += 0.5
        return await self.engine.receive(policy, version, weights, checksum)


def test_lost_and_corrupted_updates_are_detected_and_retried():
    trainer = _trainer()
    state = trained_state(trainer)
    update = weight_sync.WeightUpdate.of(1, weight_sync.snapshot(trainer, state))

    async def main():
        with _engine(trainer) as engine:
            transport = FaultyTransport(engine, ["lost", "corrupt"])
            attempts = await weight_sync.deliver(transport, "current", update)
            assert attempts == 3
            # Until the clean attempt, the sampler kept serving version 0.
            assert [policies for _, policies in transport.seen] == [{"current": 0}] * 3
            assert await engine.policies() == {"current": 1}
            result = await engine.generate(GenerateRequest(PROMPT, GREEDY))
            assert result.versions == [1] * 4

            # Corrupted every time: a loud failure, and still the old weights under version 1.
            update2 = weight_sync.WeightUpdate.of(2, jax.tree.map(
                lambda x: x * 2, update.weights))
            transport = FaultyTransport(engine, ["corrupt"] * weight_sync.DELIVERY_ATTEMPTS)
            with pytest.raises(weight_sync.DeliveryError, match="not confirmed"):
                await weight_sync.deliver(transport, "current", update2)
            assert await engine.policies() == {"current": 1}
            again = await engine.generate(GenerateRequest(PROMPT, GREEDY))
            assert again.tokens == result.tokens and again.versions == [1] * 4

    asyncio.run(main())


def test_weights_placed_on_the_samplers_devices_are_installed_and_published_as_they_are():
    """A pod leader's gather placed straight onto its sampler's devices (`PlacedWeights`): the
    engine serves exactly what an update through host memory would, and the hub publishes the
    checksum of the host weights, making their bytes only when a worker downloads them."""
    import httpx

    from agentrl_jax.pipeline.rollout_hub import RolloutHub
    from agentrl_jax.pipeline.trainer_driver import ParamGather, onto
    from agentrl_jax.pipeline.wire_format import weights_from_bytes
    from agentrl_jax.sampling.weights import weight_shardings
    from agentrl_jax.tree_digest import layered_digest, tree_digest

    c = ts.default_config()
    c.seq_buckets, c.tokens_per_micro = (16,), 64
    c.optimizer.learning_rate = 5e-2
    cfg = ModelConfig.tiny()
    trainer = ts.Trainer(Decoder(cfg, rngs=nnx.Rngs(0)), c,
                         make_mesh(fsdp=2, tensor=2, devices=jax.devices()[:4]))
    state = trained_state(trainer)
    host = jax.device_get(weights_of(trainer.model(state.params)))
    sampler_mesh = make_mesh(fsdp=1, tensor=2, devices=jax.devices()[4:6])
    sampler_model = Decoder(cfg, rngs=nnx.Rngs(1))   # other weights until the sync
    gathered = ParamGather()(weights_of(trainer.model(state.params)),
                             onto(weight_shardings(sampler_model, sampler_mesh)))
    placed = weight_sync.PlacedWeights(gathered, layered_digest(gathered))
    assert placed.checksum == tree_digest(host)
    hub = RolloutHub({"name": "test"}, 2, claim=None, deliver=None)

    async def main():
        sampler = SamplingEngine(sampler_model, ENGINE, mesh=sampler_mesh)
        with AsyncSamplingEngine(sampler) as engine:
            updated = await weight_sync.sync_weights(engine, trainer, state, 3, stale_every=None,
                                                     hub=hub, weights=placed)
            assert updated == ["current"] and await engine.policies() == {"current": 3}
            got = await engine.generate(GenerateRequest(PROMPT, GREEDY))
        url = await hub.start()
        async with httpx.AsyncClient(base_url=url) as http:
            reply = await http.get("/weights")
        await hub.stop()
        return got, reply

    got, reply = asyncio.run(main())
    assert reply.headers["x-checksum"] == tree_digest(host) == hub.published("current", 3)
    downloaded = weights_from_bytes(reply.content)
    assert tree_digest(downloaded) == tree_digest(host)
    with AsyncSamplingEngine(SamplingEngine(trainer.model(jax.device_get(state.params)),
                                            ENGINE)) as plain:
        want = asyncio.run(plain.generate(GenerateRequest(PROMPT, GREEDY)))
    assert got.tokens == want.tokens and got.versions == [3] * len(got.tokens)
    np.testing.assert_allclose(got.logprobs, want.logprobs, atol=1e-5)
