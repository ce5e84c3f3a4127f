"""The engine on a tensor-parallel sampler mesh of 8 virtual CPU devices equals unsharded."""

import jax
import numpy as np
from jax.sharding import Mesh

from agentrl_jax.sampling import GenerateRequest, SamplingEngine, SamplingParams
from tests.sampling.conftest import TINY_ENGINE, random_prompt, tiny_model


def test_tensor_parallel_engine_equals_unsharded():
    assert len(jax.devices()) >= 8
    model = tiny_model("qwen2", num_heads=8, num_kv_heads=8, head_dim=8)
    params = SamplingParams(temperature=0.8, max_new_tokens=9, seed=5)
    requests = [GenerateRequest(random_prompt(n, n), params, session_id=f"s{n}")
                for n in (4, 11, 19)]
    plain = SamplingEngine(model, TINY_ENGINE).generate(requests)

    mesh = Mesh(np.array(jax.devices()[:8]).reshape(2, 4), ("fsdp", "tensor"))
    engine = SamplingEngine(model, TINY_ENGINE, mesh=mesh)
    assert engine._cache.k.sharding.spec[1] == "tensor"  # kv heads split over the tensor axis
    sharded = engine.generate(requests)
    for a, b in zip(plain, sharded, strict=True):
        assert a.tokens == b.tokens
        np.testing.assert_allclose(a.logprobs, b.logprobs, atol=1e-4)  # reduction order
    # Second turns reuse the sharded cache.
    follow = [GenerateRequest(list(r.prompt) + res.tokens + [3, 4], params, session_id=r.session_id)
              for r, res in zip(requests, sharded, strict=True)]
    again = engine.generate(follow)
    assert all(r.num_reused_tokens > 0 for r in again)
    expected = SamplingEngine(model, TINY_ENGINE).generate(
        [GenerateRequest(r.prompt, params) for r in follow])
    assert [r.tokens for r in again] == [r.tokens for r in expected]
