"""The shapes of the published models the paper's configs train, without their weights.

Each entry is the part of the model's Hugging Face `config.json` that `ModelConfig.from_hf`
reads, as published with the Instruct checkpoint (Qwen2.5: `Qwen/Qwen2.5-*-Instruct`; GLM-4:
`THUDM/GLM-4-9B-0414`). An ahead-of-time compilation (`agentrl_jax.aot`) and the capacity model
(`benchmarks/pod_model.py`) build the model's shapes from them where no checkpoint is at hand.
"""

from __future__ import annotations

from typing import Any

from agentrl_jax.models.config import ModelConfig

_QWEN25 = dict(model_type="qwen2", rope_theta=1000000.0, rms_norm_eps=1e-6,
               max_position_embeddings=32768, bos_token_id=151643, eos_token_id=151645)

HF_CONFIGS: dict[str, dict[str, Any]] = {
    "Qwen/Qwen2.5-3B-Instruct": dict(
        _QWEN25, vocab_size=151936, hidden_size=2048, intermediate_size=11008,
        num_hidden_layers=36, num_attention_heads=16, num_key_value_heads=2,
        tie_word_embeddings=True),
    "Qwen/Qwen2.5-7B-Instruct": dict(
        _QWEN25, vocab_size=152064, hidden_size=3584, intermediate_size=18944,
        num_hidden_layers=28, num_attention_heads=28, num_key_value_heads=4,
        tie_word_embeddings=False),
    "Qwen/Qwen2.5-14B-Instruct": dict(
        _QWEN25, vocab_size=152064, hidden_size=5120, intermediate_size=13824,
        num_hidden_layers=48, num_attention_heads=40, num_key_value_heads=8,
        tie_word_embeddings=False),
    "Qwen/Qwen2.5-32B-Instruct": dict(
        _QWEN25, vocab_size=152064, hidden_size=5120, intermediate_size=27648,
        num_hidden_layers=64, num_attention_heads=40, num_key_value_heads=8,
        tie_word_embeddings=False),
    "THUDM/GLM-4-9B-0414": dict(
        model_type="glm4", vocab_size=151552, hidden_size=4096, intermediate_size=13696,
        num_hidden_layers=40, num_attention_heads=32, num_key_value_heads=2, head_dim=128,
        partial_rotary_factor=0.5, attention_bias=True, rope_theta=10000.0,
        rms_norm_eps=1e-5, max_position_embeddings=32768, tie_word_embeddings=False,
        pad_token_id=151329, eos_token_id=[151329, 151336, 151338]),
}


def published_config(name: str, **overrides) -> ModelConfig:
    """The `ModelConfig` of the published model `name` (a key of `HF_CONFIGS`)."""
    if name not in HF_CONFIGS:
        raise ValueError(f"no published shape for {name!r}; known: {', '.join(HF_CONFIGS)}")
    return ModelConfig.from_hf(HF_CONFIGS[name], **overrides)
