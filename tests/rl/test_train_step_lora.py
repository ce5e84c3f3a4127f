"""`trainer.lora`: adapter-only gradients and optimizer state over a frozen (bf16-able) base,
checked against a single-device reference written out by hand."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

from agentrl_jax.models import lora
from agentrl_jax.models.logprobs import token_logprobs
from agentrl_jax.rl import batch as batch_lib
from agentrl_jax.rl import losses
from agentrl_jax.rl import optimizer as opt_lib
from agentrl_jax.rl import train_step as ts

VOCAB = 128


def make_trajs(seed, n=12, max_len=20):
    rng = np.random.default_rng(seed)
    return [batch_lib.Trajectory(
        tokens=rng.integers(0, VOCAB, length),
        loss_mask=(rng.random(length) < 0.6).astype(float),
        behaviour_logprobs=np.log(1.0 / VOCAB) + 0.3 * rng.normal(size=length),
        advantage=float(rng.normal()),
    ) for length in rng.integers(3, max_len, n)]


def config(**lora_kw):
    c = ts.default_config()
    c.seq_buckets = (16, 32)
    c.tokens_per_micro = 64
    c.optimizer.learning_rate = 1e-2
    c.lora.update(enabled=True, rank=4, alpha=8.0, **lora_kw)
    return c


def test_only_adapters_train_and_match_a_hand_written_reference(model, mesh):
    c = config()
    trainer = ts.Trainer(model, c, mesh)
    state = trainer.init_state()
    names = set(state.params["layers"])
    assert set(state.params) == {"layers"} and all("_lora_" in n for n in names)
    assert len(names) == 14
    mu = state.opt_state[1][0].mu
    assert jax.tree.structure(mu) == jax.tree.structure(state.params)
    base_before = jax.device_get(trainer.frozen_params)

    micro, n_tokens = batch_lib.pack(make_trajs(0, n=24), c.seq_buckets, c.tokens_per_micro, 4)
    assert len(micro) >= 2
    adapted = lora.with_adapters(model, lora.LoraConfig(rank=4, alpha=8.0), seed=0)
    graphdef, adapters, base = lora.split(adapted)
    full = jax.tree.map(lambda *xs: np.concatenate(xs), *micro)

    def loss_fn(a):
        m = nnx.merge(graphdef, lora.combine(base, a))
        logp, ent = token_logprobs(m, full.tokens, full.positions, full.segment_ids,
                                   full.targets)
        return losses.policy_loss(logp, full.behaviour_logprobs, full.advantages,
                                  full.loss_mask, n_tokens, c.loss, entropy=ent)[0]

    ref_grads = jax.grad(loss_fn)(adapters)
    tx = opt_lib.make_optimizer(c.optimizer)
    ref_adapters = optax.apply_updates(adapters, tx.update(ref_grads, tx.init(adapters),
                                                           adapters)[0])

    grads, _ = trainer.gradients(state.params, micro, n_tokens)
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, atol=2e-6, rtol=2e-5),
                 grads, ref_grads)
    # B = 0 at the start: A gets no gradient, B does.
    assert float(jnp.abs(grads["layers"]["q_proj_lora_a"]).max()) == 0.0
    assert float(jnp.abs(grads["layers"]["q_proj_lora_b"]).max()) > 0.0
    for _ in range(2):
        state, _ = trainer.step(state, micro, n_tokens)
        if _ == 0:
            jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, atol=1e-5),
                         state.params, ref_adapters)
    # The base is untouched, bit for bit; adapters moved and stay sharded by the rules.
    jax.tree.map(np.testing.assert_array_equal, jax.device_get(trainer.frozen_params),
                 base_before)
    b = state.params["layers"]["q_proj_lora_b"]
    assert b.sharding.spec == jax.sharding.PartitionSpec(None, None, "tensor")
    assert float(jnp.abs(state.params["layers"]["q_proj_lora_a"]
                         - adapters["layers"]["q_proj_lora_a"]).max()) > 0


def test_bf16_base_with_fp32_adapters(model, mesh):
    micro, n = batch_lib.pack(make_trajs(3), (16, 32), 64, 4)
    fp32 = ts.Trainer(model, config(), mesh)
    bf16 = ts.Trainer(model, config(base_dtype="bfloat16"), mesh)
    assert all(x.dtype == jnp.bfloat16 for x in jax.tree.leaves(bf16.frozen_params))
    state = bf16.init_state()
    state, _ = bf16.step(state, micro, n)  # B ≠ 0 after a step: A gets gradients too
    assert all(x.dtype == jnp.float32 for x in jax.tree.leaves(state.params))
    grads, _ = bf16.gradients(state.params, micro, n)
    fp32_grads, _ = fp32.gradients(state.params, micro, n)
    assert all(x.dtype == jnp.float32 for x in jax.tree.leaves(grads))
    a = np.concatenate([np.ravel(x) for x in jax.tree.leaves(grads)])
    b = np.concatenate([np.ravel(x) for x in jax.tree.leaves(fp32_grads)])
    assert a @ b / np.linalg.norm(a) / np.linalg.norm(b) > 0.99
    assert bf16.base_fingerprint != fp32.base_fingerprint


def test_kl_reference_is_the_base_without_a_second_copy(model, mesh):
    c = config()
    c.loss.kl_coef = 0.5
    trainer = ts.Trainer(model, c, mesh)
    assert trainer.ref_params is trainer.frozen_params
    micro, n = batch_lib.pack(make_trajs(4), (16, 32), 64, 4)
    state = trainer.init_state()
    _, m = trainer.gradients(state.params, micro, n)
    np.testing.assert_allclose(m["kl"], 0.0, atol=1e-7)  # B = 0: the policy is the base
    state, _ = trainer.step(state, micro, n)
    _, m = trainer.gradients(state.params, micro, n)
    assert m["kl"] > 1e-6
    # The merged view computes the policy: logprobs of trainer == those of lora.merged(model)
    merged = lora.merged(trainer.model(jax.device_get(state.params)))
    mb = micro[0]
    want, _ = token_logprobs(merged, mb.tokens, mb.positions, mb.segment_ids, mb.targets)
    got, _ = trainer.logprobs(state.params, mb)
    np.testing.assert_allclose(got, want, atol=2e-5)
    # Another base, given explicitly, is the one the adapters sit on
    other = jax.tree.map(lambda w: 1.5 * w, trainer.frozen_params)
    merged_other = lora.merged(trainer.model(jax.device_get(state.params), other))
    want, _ = token_logprobs(merged_other, mb.tokens, mb.positions, mb.segment_ids, mb.targets)
    got, _ = trainer.logprobs(state.params, mb, other)
    np.testing.assert_allclose(got, want, atol=2e-5)
    assert np.abs(np.asarray(got) - np.asarray(trainer.logprobs(state.params, mb)[0])).max() > 1e-3


def test_lora_off_by_default_and_configurable_targets(model, mesh):
    assert not ts.default_config().lora.enabled
    assert ts.lora_of(ts.default_config()) is None
    trainer = ts.Trainer(model, config(targets=("q_proj", "v_proj")), mesh)
    assert set(trainer.init_state().params["layers"]) == {
        "q_proj_lora_a", "q_proj_lora_b", "v_proj_lora_a", "v_proj_lora_b"}


def test_training_starts_from_a_peft_adapter(model, mesh, tmp_path):
    from agentrl_jax.models import peft_io

    adapted = lora.with_adapters(model, lora.LoraConfig(rank=2, alpha=4.0, targets=("v_proj",)))
    graphdef, adapters, base = lora.split(adapted)
    adapters = jax.tree.map(lambda x: x + 0.5, adapters)  # nonzero B: not a fresh adapter
    peft_io.save_adapter(nnx.merge(graphdef, lora.combine(base, adapters)), tmp_path)
    c = config()
    c.lora.peft_adapter = str(tmp_path)  # rank, alpha and targets come from the adapter
    trainer = ts.Trainer(model, c, mesh)
    assert trainer.lora == lora.LoraConfig(rank=2, alpha=4.0, targets=("v_proj",))
    jax.tree.map(np.testing.assert_allclose, jax.device_get(trainer.init_state().params),
                 adapters)
