"""LoRA with out-of-process sampling workers: the worker loads and verifies its own base once,
every update carries the adapters alone, a lost or corrupted download is detected and fetched
again (never served), and the stale policy is one more adapter over the same base."""

import asyncio
import os
import subprocess
import sys

import httpx
import jax
import numpy as np
import pytest
from flax import nnx
from jax.sharding import Mesh

from agentrl_jax.controller.client import ControllerClient
from agentrl_jax.data import TaskStream
from agentrl_jax.models import lora
from agentrl_jax.models.config import ModelConfig
from agentrl_jax.models.decoder import Decoder
from agentrl_jax.models.hf_io import load_hf, save_hf
from agentrl_jax.pipeline import runner, weight_sync
from agentrl_jax.pipeline.rollout_hub import HubSettings, RolloutHub
from agentrl_jax.pipeline.sampling_worker import (
    FETCH_ATTEMPTS,
    SamplingWorker,
    adapter_model_from_spec,
    adapter_spec,
    make_spec,
)
from agentrl_jax.rl import advantages
from agentrl_jax.rl import train_step as ts
from agentrl_jax.rollout.agent_loop import AgentSpec
from agentrl_jax.sampling import (
    AsyncSamplingEngine,
    EngineConfig,
    GenerateRequest,
    SamplingEngine,
)
from agentrl_jax.sampling.weights import weights_of
from agentrl_jax.tree_digest import tree_digest
from tests.support.pipeline_stack import pipeline_configs
from tests.support.tiny_engine import ENGINE, GREEDY, PROMPT, trained_state


def _save_base(directory, seed=0, **overrides):
    """A random tiny model written as an HF directory: the model source trainer and worker
    both load."""
    save_hf(Decoder(ModelConfig.tiny(**overrides), rngs=nnx.Rngs(seed)), directory)
    return str(directory)


@pytest.fixture(scope="module")
def base_dir(tmp_path_factory):
    return _save_base(tmp_path_factory.mktemp("base"))


def _trainer(source, **lora_options):
    c = ts.default_config()
    c.seq_buckets, c.tokens_per_micro = (16,), 64
    c.optimizer.learning_rate = 5e-2
    c.lora.update(enabled=True, rank=4, alpha=8.0, **lora_options)
    mesh = Mesh(np.array(jax.devices()[:4]).reshape(1, 2, 2), ("data", "fsdp", "tensor"))
    return ts.Trainer(load_hf(source), c, mesh)



async def _no_claims():
    return None


def _publishing_hub(spec):
    """A hub that only serves weights: it declines every claim and delivers nothing."""
    return RolloutHub(spec, group_size=2, claim=_no_claims, deliver=lambda rollout: None)


def _spec(trainer, source):
    agent = AgentSpec(tokenizer=None, sampling=GREEDY)
    cfg = trainer.model_view().cfg.replace(lora=None)
    return make_spec(cfg, "unused", "http://127.0.0.1:1/api", ENGINE, agent,
                     adapters=adapter_spec(trainer, source))


def _live_bytes():
    jax.effects_barrier()
    return sum(x.nbytes for x in jax.live_arrays())


class FaultyTransport(httpx.AsyncBaseTransport):
    """Between hub and worker: applies one fault from `faults` to each weight download
    ("lost": the connection drops; "corrupt": one value of the blob changes in transit)."""

    def __init__(self, faults=()):
        self.inner = httpx.AsyncHTTPTransport()
        self.faults, self.applied = list(faults), []

    async def handle_async_request(self, request):
        if not request.url.path.endswith("/weights"):
            return await self.inner.handle_async_request(request)
        fault = self.faults.pop(0) if self.faults else None
        self.applied.append(fault)
        if fault == "lost":
            raise httpx.ReadError("connection lost", request=request)
        response = await self.inner.handle_async_request(request)
        body = bytearray(await response.aread())
        if fault == "corrupt":
            body[-3] ^= 0x40  # inside the last tensor's data: still a well-formed blob
        headers = [(k, v) for k, v in response.headers.items() if k.lower() != "content-length"]
        return httpx.Response(response.status_code, headers=headers, content=bytes(body))

    async def aclose(self):
        await self.inner.aclose()


def test_worker_serves_the_trainers_adapters_over_its_own_base(base_dir):
    trainer = _trainer(base_dir)
    state = trained_state(trainer)
    adapters = jax.device_get(state.params)
    hub = _publishing_hub(_spec(trainer, base_dir))

    async def main():
        url = await hub.start()
        worker = SamplingWorker(url, worker_id="w")
        async with worker.connect() as http:
            engine = await worker.build_engine(http, await worker.spec(http))
            with engine:
                assert await weight_sync.sync_weights(None, trainer, state, 1, stale_every=None,
                                                      hub=hub) == ["current"]
                blob = (await http.get("/weights")).content
                await worker.heartbeat(http, engine)
                assert await engine.policies() == {"current": 1}
                before = _live_bytes()
                # Cross-policy: the stale snapshot arrives as one more adapter.
                assert await weight_sync.sync_weights(None, trainer, state, 2, stale_every=2,
                                                      hub=hub) == ["current", "stale"]
                await worker.heartbeat(http, engine)
                grown = _live_bytes() - before
                assert await engine.policies() == {"current": 2, "stale": 2}
                await worker.heartbeat(http, engine)  # reports what it serves
                got = {p: await engine.generate(GenerateRequest(PROMPT, GREEDY, policy=p))
                       for p in ("current", "stale")}
                return blob, grown, engine.base_bytes(), worker.served(), got
        await hub.stop()

    blob, grown, base_bytes, served, got = asyncio.run(main())
    checksum = tree_digest(adapters)
    assert served == hub.served("w") == {"current": (2, checksum), "stale": (2, checksum)}
    # Only adapter bytes travel, and the second policy costs an adapter, never a base.
    adapter_bytes = sum(x.nbytes for x in jax.tree.leaves(adapters))
    full_bytes = sum(x.nbytes for x in jax.tree.leaves(weights_of(trainer.model(state.params))))
    assert len(blob) < 2 * adapter_bytes and 5 * len(blob) < full_bytes
    assert base_bytes > 10 * adapter_bytes and grown <= 2 * adapter_bytes
    # The worker samples what the trainer's adapters merged into its base compute.
    merged = lora.merged(trainer.model(adapters))
    with AsyncSamplingEngine(SamplingEngine(merged, ENGINE)) as plain:
        want = asyncio.run(plain.generate(GenerateRequest(PROMPT, GREEDY)))
    for policy in ("current", "stale"):
        assert got[policy].tokens == want.tokens and got[policy].versions == [2] * 4
        np.testing.assert_allclose(got[policy].logprobs, want.logprobs, atol=1e-4)


def test_lost_and_corrupted_downloads_are_detected_and_fetched_again(base_dir):
    trainer = _trainer(base_dir)
    state = trained_state(trainer)
    update = weight_sync.WeightUpdate.of(1, weight_sync.snapshot(trainer, state))
    hub = _publishing_hub(_spec(trainer, base_dir))

    async def main():
        url = await hub.start()
        transport = FaultyTransport()
        worker = SamplingWorker(url, worker_id="w", transport=transport)
        async with worker.connect() as http:
            engine = await worker.build_engine(http, await worker.spec(http))
            with engine:
                hub.publish("current", 1, update.weights, checksum=update.checksum)
                transport.faults = ["lost", "corrupt"]
                await worker.heartbeat(http, engine)
                assert transport.applied == ["lost", "corrupt", None]
                assert await engine.policies() == {"current": 1}
                assert worker.served() == {"current": (1, update.checksum)}
                first = await engine.generate(GenerateRequest(PROMPT, GREEDY))
                assert first.versions == [1] * 4

                # Corrupted on every attempt: the worker goes on serving version 1 (and says
                # so), and fetches version 2 again at its next heartbeat.
                update2 = weight_sync.WeightUpdate.of(2, jax.tree.map(lambda x: x * 2,
                                                                      update.weights))
                hub.publish("current", 2, update2.weights, checksum=update2.checksum)
                transport.faults, transport.applied = ["corrupt"] * FETCH_ATTEMPTS, []
                await worker.heartbeat(http, engine)
                assert transport.applied == ["corrupt"] * FETCH_ATTEMPTS
                assert await engine.policies() == {"current": 1}
                again = await engine.generate(GenerateRequest(PROMPT, GREEDY))
                assert again.tokens == first.tokens and again.versions == [1] * 4
                await worker.heartbeat(http, engine)  # clean this time
                assert hub.served("w") == {"current": (1, update.checksum)}  # reported before
                assert worker.served() == {"current": (2, update2.checksum)}
                assert await engine.policies() == {"current": 2}
        await hub.stop()

    asyncio.run(main())


def test_hub_refuses_claims_from_a_worker_serving_unpublished_weights():
    async def claim():
        return 0, "t", 0

    hub = RolloutHub({}, group_size=2, claim=claim, deliver=lambda rollout: None)
    weights = {"layers": {"q_proj_lora_b": np.ones((2, 4, 8), np.float32)}}
    hub.publish("current", 3, weights)

    async def main():
        url = await hub.start()
        async with httpx.AsyncClient(base_url=url) as http:
            async def claim_after(serving):
                await http.post("/heartbeat", json={"worker_id": "w", "serving": serving})
                return await http.post("/claim", json={"worker_id": "w"})

            bad = await claim_after({"current": [3, "0" * 64]})
            assert bad.status_code == 409 and "unpublished" in bad.json()["detail"]
            assert (await claim_after({"current": [3, tree_digest(weights)]})).status_code == 200
            malformed = await http.post("/heartbeat", json={"worker_id": "w",
                                                            "serving": {"current": 3}})
            assert malformed.status_code == 422
        await hub.stop()

    asyncio.run(main())


def test_worker_refuses_a_base_other_than_the_trainers(base_dir, tmp_path):
    trainer = _trainer(base_dir, base_dtype="bfloat16")
    spec = _spec(trainer, base_dir)
    # The same source, held in bf16 as the trainer holds it: accepted, base in bf16.
    model = adapter_model_from_spec(spec)
    assert model.layers.q_proj[...].dtype == jax.numpy.bfloat16
    assert model.layers.q_proj_lora_a[...].dtype == np.float32
    # Other weights of the same architecture: refused before serving anything.
    other = _save_base(tmp_path / "other", seed=1)
    with pytest.raises(lora.BaseMismatchError, match="fingerprint"):
        adapter_model_from_spec({**spec, "adapters": {**spec["adapters"], "base_model": other}})
    # Another architecture: refused too.
    wide = _save_base(tmp_path / "wide", hidden_size=96)
    with pytest.raises(lora.BaseMismatchError, match="trainer's model"):
        adapter_model_from_spec({**spec, "adapters": {**spec["adapters"], "base_model": wide}})


def test_sync_refuses_a_hub_that_disagrees_with_the_trainer_on_lora(base_dir):
    trainer = _trainer(base_dir)
    with pytest.raises(ValueError, match="disagree on LoRA"):
        asyncio.run(weight_sync.sync_weights(None, trainer, trainer.init_state(), 1,
                                             stale_every=None, hub=_publishing_hub({})))


def test_lora_worker_process_trains_with_both_policies(fleet, tokenizer, tmp_path):
    source = _save_base(tmp_path / "base", vocab_size=len(tokenizer), hidden_size=32,
                        intermediate_size=64, num_layers=1, num_heads=2, num_kv_heads=1)
    c = ts.default_config()
    c.seq_buckets, c.tokens_per_micro = (512,), 1024
    c.optimizer.learning_rate = 1e-2
    c.lora.update(enabled=True, rank=4, alpha=8.0)
    mesh = Mesh(np.array(jax.devices()[2:4]).reshape(1, 2, 1), ("data", "fsdp", "tensor"))
    trainer = ts.Trainer(load_hf(source), c, mesh)
    pcfg, agent = pipeline_configs(tokenizer, "async", stale_ratio=0.5, steps=3)
    pcfg.rollout_workers = 0  # every rollout comes from the worker process
    engine = EngineConfig(max_batch=8, page_size=16, num_pages=256, max_context=512,
                          prefill_buckets=(256,), context_buckets=(512,), batch_buckets=(8,),
                          steps_per_sync=4)
    spec = make_spec(trainer.model_view().cfg.replace(lora=None), "smollm2-135m-instruct",
                     fleet.url, engine, agent, adapters=adapter_spec(trainer, source))
    reports = []

    async def go():
        async with ControllerClient(fleet.url, start_jitter_s=0) as client:
            stream = TaskStream({"echo": await client.get_indices("echo")}, seed=0)
            pipeline = runner.RLPipeline(
                pcfg, client=client, engine=None, trainer=trainer, agent=agent,
                stream=stream, adv_config=advantages.default_config(),
                on_step=reports.append,
                hub=RolloutHub.of(HubSettings(spec, lease_timeout_s=30.0), pcfg.group_size))
            hub = pipeline.hub
            url = await hub.start()
            proc = subprocess.Popen(
                [sys.executable, "-m", "agentrl_jax.pipeline.sampling_worker", "--hub", url,
                 "--concurrency", "2", "--worker-id", "a"],
                env={**os.environ, "PYTHONUNBUFFERED": "1", "HF_HUB_OFFLINE": "1"},
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            try:
                state = await asyncio.wait_for(pipeline.run(trainer.init_state(0)), 600)
                final = tree_digest(jax.device_get(state.params))
                for _ in range(600):  # the worker picks up and confirms the last version
                    if hub.served("a").get("current") == (3, final):
                        break
                    await asyncio.sleep(0.1)
                return state, final, hub
            finally:
                proc.kill()
                proc.wait()
                await hub.stop()

    state, final, hub = asyncio.run(go())
    assert int(state.step) == 3 and [r.step for r in reports] == [1, 2, 3]
    assert hub.served("a")["current"] == (3, final)
    trained = [r for rep in reports for r in rep.rollouts if r.trainable]
    assert trained
    ids = np.concatenate([r.policy_ids[r.loss_mask > 0] for r in trained])
    assert set(ids.tolist()) == {0, 1}  # current and stale both sampled by the worker
    versions = np.concatenate([r.versions[r.loss_mask > 0] for r in trained])
    assert versions.max() >= 1
