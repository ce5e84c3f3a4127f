"""The sharded train step against an unsharded single-batch reference written out by hand."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx

from agentrl_jax.models.config import ModelConfig
from agentrl_jax.models.decoder import Decoder
from agentrl_jax.models.logprobs import token_logprobs
from agentrl_jax.rl import batch as batch_lib
from agentrl_jax.rl import losses
from agentrl_jax.rl import optimizer as opt_lib
from agentrl_jax.rl import train_step as ts

VOCAB = 128


def make_trajs(seed, n=12, max_len=20, loss_frac=0.6):
    rng = np.random.default_rng(seed)
    out = []
    for length in rng.integers(3, max_len, n):
        out.append(batch_lib.Trajectory(
            tokens=rng.integers(0, VOCAB, length),
            loss_mask=(rng.random(length) < loss_frac).astype(float),
            behaviour_logprobs=np.log(1.0 / VOCAB) + 0.3 * rng.normal(size=length),
            advantage=float(rng.normal()),
        ))
    return out


def config(**kw):
    c = ts.default_config()
    c.seq_buckets = (16, 32)
    c.tokens_per_micro = 64
    c.optimizer.learning_rate = 1e-3
    c.update(kw)
    return c


@pytest.fixture(scope="module")
def trainer(model, mesh):
    """Shared by the tests that use the default config (each Trainer compiles its own step)."""
    return ts.Trainer(model, config(), mesh)


def reference_update(model, c, micro, n_tokens):
    """Full batch, one device, no accumulation: loss -> grad -> AdamW, spelled out."""
    full = jax.tree.map(lambda *xs: np.concatenate(xs), *micro)
    graphdef, state = nnx.split(model)
    params = nnx.to_pure_dict(state)

    def loss_fn(p):
        logp, ent = token_logprobs(nnx.merge(graphdef, p), full.tokens, full.positions,
                                   full.segment_ids, full.targets)
        return losses.policy_loss(logp, full.behaviour_logprobs, full.advantages,
                                  full.loss_mask, n_tokens, c.loss, entropy=ent)[0]

    grads = jax.grad(loss_fn)(params)
    tx = opt_lib.make_optimizer(c.optimizer)
    updates, _ = tx.update(grads, tx.init(params), params)
    return grads, optax.apply_updates(params, updates)


def test_sharded_step_matches_unsharded_reference(model, trainer):
    c = config()
    micro, n_tokens = batch_lib.pack(make_trajs(0, n=24), c.seq_buckets, c.tokens_per_micro, 4)
    assert len(micro) >= 2  # exercises accumulation
    ref_grads, ref_params = reference_update(model, c, micro, n_tokens)

    state = trainer.init_state()
    grads, _ = trainer.gradients(state.params, micro, n_tokens)
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, atol=2e-6, rtol=2e-5),
                 grads, ref_grads)
    state, metrics = trainer.step(state, micro, n_tokens)
    # Adam's first step is lr·g/(|g| + eps): a gradient near 0 amplifies float noise (the
    # gradients themselves are compared tightly above), so compare at 3% of the learning rate
    # (one element of 16,384 differed by 1.6% on one host, with or without the compile cache).
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, atol=3e-5), state.params,
                 ref_params)
    assert int(state.step) == 1 and metrics["num_tokens"] == n_tokens
    # parameters and Adam moments stay sharded by the logical rules
    q = state.params["layers"]["q_proj"]
    assert q.sharding.spec == jax.sharding.PartitionSpec(None, "fsdp", "tensor")
    mu = state.opt_state[1][0].mu["layers"]["q_proj"]
    assert mu.sharding.spec == q.sharding.spec


def test_loss_positions_only_match_the_all_positions_reference(model, mesh):
    # The vocabulary projection at each row's loss positions alone (8 of 32, padded) gives
    # the gradient of the reference that projects every position.
    c = config(logprob_min_positions=4)
    micro, n_tokens = batch_lib.pack(make_trajs(8, n=24, loss_frac=0.15), c.seq_buckets,
                                     c.tokens_per_micro, 4)
    widths = {None if at is None else at.shape[1]
              for at in (batch_lib.loss_positions(mb.loss_mask, 4) for mb in micro)}
    assert widths & {4, 8}, widths  # the selection is exercised
    ref_grads, _ = reference_update(model, c, micro, n_tokens)
    trainer = ts.Trainer(model, c, mesh)
    grads, metrics = trainer.gradients(trainer.init_state().params, micro, n_tokens)
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, atol=2e-6, rtol=2e-5),
                 grads, ref_grads)
    assert metrics["num_tokens"] == n_tokens


def test_micro_batch_split_does_not_change_gradients(trainer):
    trajs = make_trajs(1, n=24)
    params = trainer.init_state().params
    g = {}
    for budget in (64, 256):  # several micro-batches vs one
        micro, n = batch_lib.pack(trajs, (16, 32), budget, 4)
        g[budget], m = trainer.gradients(params, micro, n)
    assert m["num_tokens"] == n
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, atol=1e-6, rtol=1e-5),
                 g[64], g[256])


def test_no_recompilation_within_buckets(mesh):
    trainer = ts.Trainer(Decoder(ModelConfig.tiny(), rngs=nnx.Rngs(2)), config(), mesh)
    state = trainer.init_state()
    for seed in range(4):  # different lengths and micro-batch counts, all in bucket 32
        trajs = make_trajs(10 + seed, n=8 + 4 * seed, max_len=30)
        micro, n = batch_lib.pack(trajs, (16, 32), 64, 4)
        state, _ = trainer.step(state, micro, n)
        assert len(micro) > 1  # so both the gradient and the accumulating program run
    assert trainer.num_traces == 1
    assert trainer.num_accumulate_traces == 1
    micro, n = batch_lib.pack(make_trajs(20, max_len=12), (16, 32), 64, 4)  # bucket 16
    state, _ = trainer.step(state, micro, n)
    assert trainer.num_traces == 2


def test_bf16_compute_keeps_fp32_master_weights(model, mesh, trainer):
    micro, n = batch_lib.pack(make_trajs(3), (16, 32), 64, 4)
    bf16 = ts.Trainer(model, config(compute_dtype="bfloat16"), mesh)
    state = bf16.init_state()
    fp32_grads, _ = trainer.gradients(state.params, micro, n)
    grads, _ = bf16.gradients(state.params, micro, n)
    state, metrics = bf16.step(state, micro, n)
    assert all(x.dtype == jnp.float32 for x in jax.tree.leaves(state.params))
    assert all(x.dtype == jnp.float32 for x in jax.tree.leaves(grads))
    assert np.isfinite(metrics["loss"])
    # bf16 gradients agree with fp32 ones to bf16 precision (cosine similarity)
    a = np.concatenate([np.ravel(x) for x in jax.tree.leaves(grads)])
    b = np.concatenate([np.ravel(x) for x in jax.tree.leaves(fp32_grads)])
    assert a @ b / np.linalg.norm(a) / np.linalg.norm(b) > 0.99


def test_reference_model_kl(model, mesh, trainer):
    c = config()
    c.loss.kl_coef = 0.5
    micro, n = batch_lib.pack(make_trajs(4), (16, 32), 64, 4)
    # reference == policy: KL (k3) is 0 and so is its gradient
    same = ts.Trainer(model, c, mesh, reference=model)
    params = same.init_state().params
    g_same, m = same.gradients(params, micro, n)
    g_none, _ = trainer.gradients(params, micro, n)
    np.testing.assert_allclose(m["kl"], 0.0, atol=1e-7)
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, atol=1e-7), g_same, g_none)
    # a different reference: the in-step forward equals precomputed reference log-probs
    same.ref_params = ts.Trainer(Decoder(ModelConfig.tiny(), rngs=nnx.Rngs(5)), c, mesh,
                                 ).init_state().params
    g_fwd, m_fwd = same.gradients(params, micro, n)
    pre = [batch_lib.TrainBatch(**{**mb.__dict__, "reference_logprobs":
                                   np.asarray(same.logprobs(same.ref_params, mb)[0])})
           for mb in micro]
    g_pre, m_pre = same.gradients(params, pre, n)  # batch log-probs take precedence
    assert m_fwd["kl"] > 1e-4
    np.testing.assert_allclose(m_fwd["kl"], m_pre["kl"], rtol=1e-5)
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, atol=1e-6), g_fwd, g_pre)


def test_decoupled_without_proximal_equals_on_policy_gradient(model, mesh):
    # π_prox = θ at the step start: r = 1 and w = π_θ/π_behav, so the gradient is
    # mean(-A w ∇log π_θ) (no clipping at r = 1).
    c = config()
    c.loss.decoupled = True
    micro, n = batch_lib.pack(make_trajs(6), (16, 32), 256, 4)
    trainer = ts.Trainer(model, c, mesh)
    params = trainer.init_state().params
    grads, m = trainer.gradients(params, micro, n)
    assert m["clip_frac"] == 0.0
    mb = micro[0]
    graphdef = trainer.graphdef

    def surrogate(p):
        logp, _ = token_logprobs(nnx.merge(graphdef, p), mb.tokens, mb.positions,
                                 mb.segment_ids, mb.targets)
        w = jnp.exp(jax.lax.stop_gradient(logp) - mb.behaviour_logprobs)
        return jnp.sum(-mb.advantages * w * logp * mb.loss_mask) / n

    expect = jax.grad(surrogate)(jax.device_get(params))
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, atol=2e-6, rtol=1e-5),
                 grads, expect)


def test_kl_without_reference_is_an_error(model, mesh):
    c = config()
    c.loss.kl_coef = 0.1
    trainer = ts.Trainer(model, c, mesh)
    micro, n = batch_lib.pack(make_trajs(7), (16, 32), 64, 4)
    with pytest.raises(ValueError, match="reference"):
        trainer.gradients(trainer.init_state().params, micro, n)


def test_gradients_of_no_micro_batches_is_an_error(trainer):
    with pytest.raises(ValueError, match="at least one micro-batch"):
        trainer.gradients(trainer.init_state().params, [], 1.0)
