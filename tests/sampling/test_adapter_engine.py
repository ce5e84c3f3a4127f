"""LoRA serving: policies are adapters over one kept base; an adapter whose placed bytes do not
match its checksum is refused, and the policy keeps serving its previous version."""

import asyncio

import jax
import numpy as np
from flax import nnx

from agentrl_jax.models import lora
from agentrl_jax.models.config import LoraConfig
from agentrl_jax.sampling import (
    AsyncSamplingEngine,
    GenerateRequest,
    SamplingEngine,
    SamplingParams,
)
from agentrl_jax.sampling.adapter_engine import AdapterSamplingEngine, adapter_tree
from agentrl_jax.tree_digest import tree_digest
from tests.sampling.conftest import TINY_ENGINE, make_engine, random_prompt, tiny_model

GREEDY = SamplingParams(temperature=0.0, max_new_tokens=6)


def _adapted(family="llama"):
    return lora.with_adapters(tiny_model(family), LoraConfig(rank=4, alpha=8.0), seed=0)


def _trained_adapters(model, seed):
    """A host adapter tree with random nonzero B, as after training."""
    tree = jax.device_get(adapter_tree(model))
    rng = np.random.default_rng(seed)
    return jax.tree.map(lambda x: (x + 0.3 * rng.normal(size=x.shape)).astype(x.dtype), tree)


def _with(model, adapters):
    graphdef, _, base = lora.split(model)
    return nnx.merge(graphdef, lora.combine(base, adapters))


async def _generate(engine, prompts, policy="current"):
    return [await engine.generate(GenerateRequest(p, GREEDY, policy=policy)) for p in prompts]


def test_adapters_served_unmerged_equal_the_merged_model(family):
    model = _adapted(family)
    current, stale = _trained_adapters(model, 1), _trained_adapters(model, 2)
    prompts = [random_prompt(5 + i, i) for i in range(3)]

    async def served():
        with AdapterSamplingEngine(make_engine(model), model) as engine:
            assert await engine.receive("current", 3, current, tree_digest(current)) == (
                3, tree_digest(current))
            assert await engine.receive("stale", 2, stale, tree_digest(stale)) == (
                2, tree_digest(stale))
            return (await _generate(engine, prompts), await _generate(engine, prompts, "stale"))

    async def merged(adapters):
        with AsyncSamplingEngine(make_engine(lora.merged(_with(model, adapters)))) as engine:
            return await _generate(engine, prompts)

    got_current, got_stale = asyncio.run(served())
    for got, want in ((got_current, asyncio.run(merged(current))),
                      (got_stale, asyncio.run(merged(stale)))):
        for g, w in zip(got, want, strict=True):
            assert g.tokens == w.tokens
            np.testing.assert_allclose(g.logprobs, w.logprobs, atol=1e-4)
    assert [r.versions for r in got_current] == [[3] * 6] * 3
    assert [r.versions for r in got_stale] == [[2] * 6] * 3
    assert got_current[0].tokens != got_stale[0].tokens  # two different policies


def test_a_second_policy_costs_an_adapter_not_a_second_base():
    model = _adapted()
    adapters = _trained_adapters(model, 1)
    adapter_bytes = sum(x.nbytes for x in jax.tree.leaves(adapters))

    async def main():
        with AdapterSamplingEngine(make_engine(model), model) as engine:
            await engine.update_params(adapters, 1)
            await engine.update_params(adapters, 1, policy="stale")
            jax.effects_barrier()
            before = sum(x.nbytes for x in jax.live_arrays())
            await engine.update_params(_trained_adapters(model, 2), 2, policy="stale")
            await engine.update_params(_trained_adapters(model, 3), 3, policy="other")
            jax.effects_barrier()
            grown = sum(x.nbytes for x in jax.live_arrays()) - before
            return grown, engine.base_bytes()

    grown, base_bytes = asyncio.run(main())
    assert base_bytes > 10 * adapter_bytes
    # "other" adds one adapter (the replaced stale one is freed); never a base.
    assert grown <= 2 * adapter_bytes


def test_corrupted_adapter_is_refused_and_the_old_version_served():
    model = _adapted()
    good, bad = _trained_adapters(model, 1), _trained_adapters(model, 1)
    bad["layers"]["v_proj_lora_b"].reshape(-1)[7] += 1.0  # a flipped value in transit
    prompts = [random_prompt(6, 0)]

    async def main():
        with AdapterSamplingEngine(make_engine(model), model) as engine:
            assert await engine.receive("current", 1, good, tree_digest(good)) == (
                1, tree_digest(good))
            before = await _generate(engine, prompts)
            served = await engine.receive("current", 2, bad, tree_digest(good))
            assert served == (1, tree_digest(bad))
            assert await engine.policies() == {"current": 1}
            after = await _generate(engine, prompts)
            return before, after

    before, after = asyncio.run(main())
    assert before[0].tokens == after[0].tokens and after[0].versions == [1] * 6


def test_adapters_on_an_8_device_sampler_mesh_equal_unsharded():
    from jax.sharding import Mesh

    model = lora.with_adapters(tiny_model("qwen2", num_heads=8, num_kv_heads=8, head_dim=8),
                               LoraConfig(rank=4, alpha=8.0))
    adapters = _trained_adapters(model, 4)
    params = SamplingParams(temperature=0.8, max_new_tokens=7, seed=5)
    prompts = [random_prompt(n, n) for n in (4, 11)]
    mesh = Mesh(np.array(jax.devices()[:8]).reshape(2, 4), ("fsdp", "tensor"))

    async def run(mesh):
        engine = SamplingEngine(model, TINY_ENGINE, mesh=mesh)
        with AdapterSamplingEngine(engine, model, mesh=mesh) as engine:
            assert (await engine.receive("current", 1, adapters, tree_digest(adapters)))[0] == 1
            return [await engine.generate(GenerateRequest(p, params)) for p in prompts]

    plain, sharded = asyncio.run(run(None)), asyncio.run(run(mesh))
    for a, b in zip(plain, sharded, strict=True):
        assert a.tokens == b.tokens
        np.testing.assert_allclose(a.logprobs, b.logprobs, atol=1e-4)


def test_adapters_from_a_trainer_mesh_do_not_recompile():
    """Adapters that carry a LoRA trainer's one-device NamedSharding (what RL syncs) are placed
    as the first ones were, so the engine's programs do not compile again."""
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    model = _adapted()
    mesh = Mesh(np.array(jax.devices()[:1]).reshape(1, 1, 1), ("data", "fsdp", "tensor"))
    prompts = [random_prompt(6, 0)]
    base = make_engine(model)

    async def main():
        with AdapterSamplingEngine(base, model) as engine:
            await engine.update_params(_trained_adapters(model, 1), 1)
            await engine._run(base.warmup)   # every shape, on the served weights' placement
            await _generate(engine, prompts)
            compiled = base.num_compiled()
            synced = jax.device_put(_trained_adapters(model, 2),
                                    NamedSharding(mesh, PartitionSpec()))
            await engine.update_params(synced, 2)
            out = await _generate(engine, prompts)
            return compiled, base.num_compiled(), out[0].versions

    compiled, after, versions = asyncio.run(main())
    assert versions == [2] * 6
    assert after == compiled
