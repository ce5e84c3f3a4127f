"""Adapters in the decoder: a new adapter is the identity, unmerged equals merged, sharded equals
unsharded, for every family."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from agentrl_jax.models import lora
from agentrl_jax.models.config import PROJECTIONS, LoraConfig, ModelConfig
from agentrl_jax.models.decoder import Decoder, KVCache, LoraParam
from agentrl_jax.parallel import sharding
from agentrl_jax.parallel.mesh import make_mesh

LORA = LoraConfig(rank=4, alpha=8.0)


def _inputs(n=12, seed=0):
    tokens = jax.random.randint(jax.random.key(seed), (2, n), 0, 128, dtype=jnp.int32)
    positions = jnp.broadcast_to(jnp.arange(n), (2, n))
    return tokens, positions, jnp.ones((2, n), jnp.int32)


def _trained(model: Decoder, seed=1) -> Decoder:
    """`model` with random (nonzero) B, as after some training."""
    graphdef, adapters, base = lora.split(model)
    keys = iter(jax.random.split(jax.random.key(seed), len(adapters["layers"])))
    adapters = jax.tree.map(lambda x: 0.1 * jax.random.normal(next(keys), x.shape), adapters)
    return nnx.merge(graphdef, lora.combine(base, adapters))


def test_new_adapter_leaves_logits_unchanged(family):
    base = Decoder(ModelConfig.tiny(family), rngs=nnx.Rngs(0))
    adapted = lora.with_adapters(base, LORA, seed=3)
    assert adapted.cfg.lora == LORA
    a = adapted.layers.q_proj_lora_a[...]
    assert float(jnp.abs(a).max()) > 0  # A is random; only B starts at zero
    inputs = _inputs()
    np.testing.assert_allclose(adapted(*inputs), base(*inputs), atol=1e-6)


def test_adapter_parameters_are_their_own_type_on_every_target():
    model = lora.with_adapters(Decoder(ModelConfig.tiny(), rngs=nnx.Rngs(0)), LORA)
    _, adapters, base = lora.split(model)
    cfg = model.cfg
    assert set(adapters["layers"]) == {f"{t}_lora_{x}" for t in PROJECTIONS for x in "ab"}
    assert not any("lora" in name for name in base["layers"])
    assert adapters["layers"]["q_proj_lora_a"].shape == (cfg.num_layers, cfg.hidden_size, 4)
    assert adapters["layers"]["down_proj_lora_b"].shape == (cfg.num_layers, 4, cfg.hidden_size)
    typed = {str(path[-1]) for path, v in nnx.iter_graph(model) if isinstance(v, LoraParam)}
    assert typed == set(adapters["layers"])


def test_targets_and_rank_are_validated():
    with pytest.raises(ValueError, match="targets"):
        LoraConfig(targets=("q_proj", "lm_head"))
    with pytest.raises(ValueError, match="rank"):
        LoraConfig(rank=0)


def test_unmerged_equals_merged_in_training_and_cached_forward(family):
    model = _trained(lora.with_adapters(Decoder(ModelConfig.tiny(family), rngs=nnx.Rngs(0)),
                                        LoraConfig(rank=4, alpha=8.0, targets=("q_proj", "v_proj",
                                                                               "up_proj"))))
    merged = lora.merged(model)
    assert merged.cfg.lora is None
    inputs = _inputs()
    got, want = model(*inputs), merged(*inputs)
    assert float(jnp.abs(got - lora.without_adapters(model)(*inputs)).max()) > 1e-3
    np.testing.assert_allclose(got, want, atol=2e-5)

    tokens, positions, _ = inputs
    slots = jnp.arange(1, 1 + tokens.size, dtype=jnp.int32).reshape(tokens.shape)
    hidden = []
    for m in (model, merged):
        h, _ = m.hidden_cached(tokens, positions, KVCache.zeros(m.cfg, 64), slots, slots)
        hidden.append(m.logits(h))
    np.testing.assert_allclose(hidden[0], hidden[1], atol=2e-5)
    np.testing.assert_allclose(hidden[0], got, atol=2e-5)


def test_sharded_on_8_devices_equals_unsharded(family):
    """Forward and adapter gradients on an fsdp × tensor mesh of 8 CPU devices."""
    model = _trained(lora.with_adapters(Decoder(ModelConfig.tiny(family), rngs=nnx.Rngs(0)),
                                        LORA))
    inputs = _inputs(16)

    def loss(adapters, base, graphdef):
        m = nnx.merge(graphdef, lora.combine(base, adapters))
        return jnp.mean(jax.nn.log_softmax(m(*inputs))[..., 0])

    graphdef, adapters, base = lora.split(model)
    want_loss, want_grads = jax.value_and_grad(loss)(adapters, base, graphdef)

    mesh = make_mesh(fsdp=4, tensor=2)
    sharded = sharding.shard_model(_trained(lora.with_adapters(
        Decoder(ModelConfig.tiny(family), rngs=nnx.Rngs(0)), LORA)), mesh)
    graphdef, s_adapters, s_base = lora.split(sharded)
    b = s_adapters["layers"]["o_proj_lora_b"]
    assert b.sharding.spec == jax.sharding.PartitionSpec(None, None, "fsdp")
    assert s_adapters["layers"]["q_proj_lora_b"].sharding.spec[2] == "tensor"
    got_loss, got_grads = jax.jit(jax.value_and_grad(loss), static_argnums=2)(
        s_adapters, s_base, graphdef)
    np.testing.assert_allclose(got_loss, want_loss, atol=1e-6)
    for g, w in zip(jax.tree.leaves(got_grads), jax.tree.leaves(want_grads), strict=True):
        np.testing.assert_allclose(g, w, atol=1e-6)
