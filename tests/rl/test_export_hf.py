"""Train a step, checkpoint, export: transformers loads the export with the same logits."""

import jax
import jax.numpy as jnp
import numpy as np
import torch
import transformers

from agentrl_jax.checkpoint import CheckpointManager
from agentrl_jax.models.hf_io import load_hf
from agentrl_jax.parallel.mesh import make_mesh
from agentrl_jax.rl import batch as batch_lib
from agentrl_jax.rl import train_step as ts
from launch.export_hf import export_checkpoint

TINY = dict(vocab_size=96, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=2, head_dim=8,
            max_position_embeddings=64, rms_norm_eps=1e-5, tie_word_embeddings=False)


def _save_base(directory, config_cls, model_cls):
    """A random tiny HF model of `model_cls` (torch seed 0) written to `directory`."""
    torch.manual_seed(0)
    hf_cfg = config_cls(**TINY)
    model_cls(hf_cfg).save_pretrained(directory)
    return hf_cfg


def _train(trainer, rng, steps):
    """`steps` steps on four random trajectories with mixed advantages."""
    trajs = [batch_lib.Trajectory(tokens=rng.integers(0, 96, 12), loss_mask=np.ones(12),
                                  behaviour_logprobs=np.full(12, -4.5), advantage=a)
             for a in (1.0, -1.0, 0.5, -0.5)]
    state = trainer.init_state()
    for _ in range(steps):
        state, _ = trainer.step(state, *batch_lib.pack(trajs, (16,), 32, 2))
    return state


def _our_logits(trainer, state, tokens):
    positions = np.tile(np.arange(tokens.shape[1], dtype=np.int32), (tokens.shape[0], 1))
    return np.asarray(trainer.model(state.params)(
        jnp.asarray(tokens), jnp.asarray(positions), jnp.ones_like(tokens)))


def test_export_after_training_matches_transformers(tmp_path):
    _save_base(tmp_path / "base", transformers.LlamaConfig, transformers.LlamaForCausalLM)
    (tmp_path / "base" / "tokenizer_config.json").write_text("{}")

    c = ts.default_config()
    c.optimizer.learning_rate = 1e-2
    trainer = ts.Trainer(load_hf(tmp_path / "base"), c,
                         make_mesh(fsdp=2, tensor=2, devices=jax.devices()[:4]))
    rng = np.random.default_rng(0)
    state = _train(trainer, rng, steps=1)
    with CheckpointManager(tmp_path / "ckpt") as mgr:
        mgr.save(1, state)
    out = export_checkpoint(tmp_path / "ckpt", tmp_path / "base", tmp_path / "out")
    assert (out / "tokenizer_config.json").exists()

    tokens = rng.integers(0, 96, (2, 10)).astype(np.int32)
    ours = _our_logits(trainer, state, tokens)
    hf = transformers.AutoModelForCausalLM.from_pretrained(out).eval()
    base = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "base").eval()
    with torch.no_grad():
        theirs = hf(torch.tensor(tokens, dtype=torch.long)).logits.numpy()
        before = base(torch.tensor(tokens, dtype=torch.long)).logits.numpy()
    assert np.abs(ours - theirs).max() < 1e-4
    assert np.abs(theirs - before).max() > 1e-3  # the export holds the trained weights


def test_lora_export_writes_merged_model_and_peft_adapter(tmp_path):
    import peft
    import pytest

    from agentrl_jax.checkpoint import BaseMismatchError
    from launch.export_hf import export_lora_checkpoint

    hf_cfg = _save_base(tmp_path / "base", transformers.Qwen2Config,
                        transformers.Qwen2ForCausalLM)
    c = ts.default_config()
    c.optimizer.learning_rate = 5e-2
    c.lora.update(enabled=True, rank=4, alpha=8.0)
    trainer = ts.Trainer(load_hf(tmp_path / "base"), c,
                         make_mesh(fsdp=2, tensor=2, devices=jax.devices()[:4]))
    rng = np.random.default_rng(0)
    state = _train(trainer, rng, steps=2)
    with CheckpointManager(tmp_path / "ckpt", base_fingerprint=trainer.base_fingerprint,
                           adapter_config=trainer.adapter_config()) as mgr:
        mgr.save(2, state)
    out, adapter = export_lora_checkpoint(tmp_path / "ckpt", tmp_path / "base", tmp_path / "out")

    tokens = rng.integers(0, 96, (2, 10)).astype(np.int32)
    ours = _our_logits(trainer, state, tokens)
    merged = transformers.AutoModelForCausalLM.from_pretrained(out).eval()
    base = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "base").eval()
    with torch.no_grad():
        before = base(torch.tensor(tokens, dtype=torch.long)).logits.numpy()
        via_merged = merged(torch.tensor(tokens, dtype=torch.long)).logits.numpy()
        via_peft = peft.PeftModel.from_pretrained(base, adapter).eval()(
            torch.tensor(tokens, dtype=torch.long)).logits.numpy()
    assert np.abs(ours - before).max() > 1e-3
    assert np.abs(ours - via_merged).max() < 1e-4
    assert np.abs(ours - via_peft).max() < 1e-4

    # Another base model: refused, never exported over the wrong weights.
    transformers.Qwen2ForCausalLM(hf_cfg).save_pretrained(tmp_path / "other")
    with pytest.raises(BaseMismatchError, match="not this run's base"):
        export_lora_checkpoint(tmp_path / "ckpt", tmp_path / "other", tmp_path / "out2")
