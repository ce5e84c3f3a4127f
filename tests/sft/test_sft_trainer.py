"""The SFT loss by hand, and that a tiny model learns its demonstrations."""

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from jax.sharding import Mesh

from agentrl_jax.models.config import ModelConfig
from agentrl_jax.models.decoder import Decoder
from agentrl_jax.rl.batch import Trajectory, pack
from agentrl_jax.sft import stage
from agentrl_jax.sft.trainer import masked_nll


def test_masked_nll_is_the_global_token_mean():
    logp = jnp.log(jnp.array([[0.5, 0.25, 0.9], [0.1, 1.0, 0.2]]))
    mask = jnp.array([[1.0, 1.0, 0.0], [0.0, 1.0, 0.0]])
    loss, metrics = masked_nll(logp, mask, jnp.asarray(6.0))   # 6 tokens in the whole step
    expected = -(np.log(0.5) + np.log(0.25) + np.log(1.0)) / 6
    np.testing.assert_allclose(loss, expected, rtol=1e-6)
    np.testing.assert_allclose(metrics["confident_token_frac"], 1 / 6, rtol=1e-6)  # only p=1.0


PROMPT, REPLY = [1, 5, 7, 9], [3, 4, 3, 4, 2]


def _fixed_reply_setup():
    """The one-episode task (a fixed reply to a fixed prompt), a one-device mesh, and an SFT
    config of 40 epochs over it."""
    traj = Trajectory(tokens=PROMPT + REPLY, loss_mask=[0] * 4 + [1] * 5,
                      behaviour_logprobs=[0.0] * 9, advantage=1.0)
    mesh = Mesh(np.array(jax.devices()[:1]).reshape(1, 1, 1), ("data", "fsdp", "tensor"))
    config = stage.default_config()
    config.update(epochs=40, tokens_per_step=16, tokens_per_micro=32, seq_buckets=(16,))
    return traj, mesh, config


def _reply_logits(model, traj):
    batch, _ = pack([traj], (16,), 16)
    return model(jnp.asarray(batch[0].tokens), jnp.asarray(batch[0].positions),
                 jnp.asarray(batch[0].segment_ids))


def test_a_tiny_model_learns_a_fixed_reply():
    cfg = ModelConfig.tiny("llama", vocab_size=32, max_position_embeddings=64)
    model = Decoder(cfg, rngs=nnx.Rngs(0))
    traj, mesh, config = _fixed_reply_setup()
    config.optimizer.update(learning_rate=1e-2, warmup_steps=0)
    losses = []
    stage.run_sft(model, [traj] * 2, config, mesh,
                  on_step=lambda step, total, m: losses.append(m["loss"]))
    assert losses[-1] < 0.1 * losses[0]
    # The trained weights are in `model`: greedy continuation reproduces the reply.
    logits = _reply_logits(model, traj)
    predicted = np.asarray(jnp.argmax(logits[0, 3:8], -1))
    np.testing.assert_array_equal(predicted, REPLY)


def test_lora_sft_learns_the_reply_and_merges_it_into_the_model():
    cfg = ModelConfig.tiny("qwen2", vocab_size=32, max_position_embeddings=64)
    model = Decoder(cfg, rngs=nnx.Rngs(0))
    before = jax.tree.map(np.array, nnx.to_pure_dict(nnx.state(model)))
    traj, mesh, config = _fixed_reply_setup()
    config.optimizer.update(learning_rate=1e-2, warmup_steps=0, weight_decay=0.0)
    config.lora.update(enabled=True, rank=4, alpha=8.0,
                       targets=("q_proj", "v_proj", "o_proj", "up_proj", "down_proj"))
    losses = []
    stage.run_sft(model, [traj] * 2, config, mesh,
                  on_step=lambda step, total, m: losses.append(m["loss"]))
    # The frozen (tiny, 0.02-std) output embedding bounds the logits, hence the loss floor.
    assert losses[-1] < 0.75 * losses[0]
    assert model.cfg.lora is None  # merged in, no adapters left
    after = nnx.to_pure_dict(nnx.state(model))
    np.testing.assert_array_equal(after["embed"], before["embed"])  # not a target: frozen
    np.testing.assert_array_equal(after["layers"]["k_proj"], before["layers"]["k_proj"])
    assert np.abs(after["layers"]["q_proj"] - before["layers"]["q_proj"]).max() > 0
    logits = _reply_logits(model, traj)
    np.testing.assert_array_equal(np.asarray(jnp.argmax(logits[0, 3:8], -1)), REPLY)


def test_auto_buckets_replace_the_configured_row_lengths(capsys):
    cfg = ModelConfig.tiny("llama", vocab_size=32, max_position_embeddings=256)
    model = Decoder(cfg, rngs=nnx.Rngs(0))
    traj, mesh, config = _fixed_reply_setup()
    # (4,) cannot hold the 8-token inputs: only the chosen row length lets the stage run.
    config.update(seq_buckets=(4,), auto_buckets=2, epochs=2, tokens_per_micro=128)
    losses = []
    stage.run_sft(model, [traj] * 2, config, mesh,
                  on_step=lambda step, total, m: losses.append(m["loss"]))
    assert len(losses) == 2 and np.isfinite(losses).all()
    assert "row lengths (128,)" in capsys.readouterr().out


def test_bf16_compute_learns_the_reply_and_keeps_fp32_weights():
    cfg = ModelConfig.tiny("llama", vocab_size=32, max_position_embeddings=64)
    traj, mesh, config = _fixed_reply_setup()
    config.optimizer.update(learning_rate=1e-2, warmup_steps=0)
    losses = {}
    for dtype in (None, "bfloat16"):
        model = Decoder(cfg, rngs=nnx.Rngs(0))
        config.compute_dtype = dtype
        losses[dtype] = []
        stage.run_sft(model, [traj] * 2, config, mesh,
                      on_step=lambda step, total, m, dtype=dtype: losses[dtype].append(m["loss"]))
    bf16 = losses["bfloat16"]
    # The same first step, computed in bf16: close to fp32's loss, not equal to it.
    assert bf16[0] != losses[None][0]
    np.testing.assert_allclose(bf16[0], losses[None][0], rtol=2e-2)
    assert bf16[-1] < 0.1 * bf16[0]
    assert all(x.dtype == jnp.float32 for x in jax.tree.leaves(nnx.state(model)))
    predicted = np.asarray(jnp.argmax(_reply_logits(model, traj)[0, 3:8], -1))
    np.testing.assert_array_equal(predicted, REPLY)
