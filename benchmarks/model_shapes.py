"""The model shapes the benchmarks time, each defined once.

`SMOLLM2_135M` is SmolLM2-135M-Instruct's config.json (30 layers, its whole vocabulary), for
random weights of its shape; `scratch_default()` is the main job's scratch model as
`experiment.policy.default_config()` defines it, at its default vocabulary.
"""

from __future__ import annotations

import jax.numpy as jnp

from agentrl_jax.models.config import ModelConfig

SMOLLM2_135M = ModelConfig(
    vocab_size=49152, hidden_size=576, intermediate_size=1536, num_layers=30, num_heads=9,
    num_kv_heads=3, head_dim=64, rope_theta=100000.0, rms_norm_eps=1e-5,
    tie_word_embeddings=True, max_position_embeddings=8192,
)


def scratch_default() -> ModelConfig:
    """configs/local_default.py's model: `experiment.policy`'s scratch shape, fp32."""
    from agentrl_jax.experiment.policy import default_config

    config = default_config()
    return ModelConfig(vocab_size=config.vocab_size, dtype=jnp.float32,
                       **config.scratch.to_dict())
