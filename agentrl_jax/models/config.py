"""Configuration of the decoder family: Llama / SmolLM2, Qwen2 / Qwen2.5 and GLM-4-0414.

One `ModelConfig` describes all three; the differences are data (biases, extra norms, partial
interleaved rotary, tied embeddings), not code paths. `from_hf` reads a transformers
`config.json` dict, `to_hf` writes one back that transformers loads.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax.numpy as jnp

# The projections a low-rank adapter can be put on (the decoder's per-layer linear weights).
PROJECTIONS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


@dataclasses.dataclass(frozen=True)
class LoraConfig:
    """Low-rank adapters W + (alpha / rank) · A B on the projections named in `targets`.

    A is [in, rank], B is [rank, out] and starts at zero, so a new adapter leaves the model
    unchanged. Part of the model's shape: a `ModelConfig` with `lora` set has adapter
    parameters (`models.lora`), one without has none.
    """

    rank: int = 16
    alpha: float = 32.0
    targets: tuple[str, ...] = PROJECTIONS

    def __post_init__(self):
        unknown = sorted(set(self.targets) - set(PROJECTIONS))
        if unknown or not self.targets:
            raise ValueError(f"LoRA targets {unknown or '()'} invalid; choose from {PROJECTIONS}")
        if self.rank < 1:
            raise ValueError(f"LoRA rank must be >= 1, not {self.rank}")

    @property
    def scale(self) -> float:
        return self.alpha / self.rank


# The HF architectures we implement, and the field that tells them apart.
ARCHITECTURES = {
    "llama": "LlamaForCausalLM",
    "qwen2": "Qwen2ForCausalLM",
    "glm4": "Glm4ForCausalLM",
}


@dataclasses.dataclass(frozen=True)
class ModelConfig:
    """Shape and flavour of a decoder-only transformer.

    Attributes:
      family: "llama", "qwen2" or "glm4" (the HF `model_type`).
      qkv_bias: q/k/v projections carry a bias (Qwen2, GLM-4).
      sandwich_norms: GLM-4's extra RMSNorms after attention and after the MLP.
      partial_rotary_factor: fraction of each head's dims that are rotated (GLM-4: 0.5).
      interleaved_rotary: rotate pairs (2i, 2i+1) (GLM-4) instead of halves (Llama, Qwen2).
      rope_scaling: None or a dict in HF's `rope_parameters` form (only "llama3" is supported).
      dtype: compute dtype of activations and matmuls; parameters stay in `param_dtype`.
      lora: low-rank adapters on some projections (None: a plain model).
    """

    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    family: str = "llama"
    rope_theta: float = 10000.0
    rope_scaling: tuple[tuple[str, Any], ...] | None = None
    partial_rotary_factor: float = 1.0
    interleaved_rotary: bool = False
    rms_norm_eps: float = 1e-6
    qkv_bias: bool = False
    sandwich_norms: bool = False
    tie_word_embeddings: bool = False
    max_position_embeddings: int = 8192
    bos_token_id: int | None = None
    eos_token_id: int | tuple[int, ...] | None = None
    pad_token_id: int | None = None
    dtype: Any = jnp.float32
    param_dtype: Any = jnp.float32
    lora: LoraConfig | None = None

    def __post_init__(self):
        if self.family not in ARCHITECTURES:
            known = list(ARCHITECTURES)
            raise ValueError(f"unknown family {self.family!r}; expected one of {known}")
        if self.num_heads % self.num_kv_heads:
            raise ValueError(
                f"num_heads={self.num_heads} is not a multiple of num_kv_heads={self.num_kv_heads}"
            )
        if self.rotary_dim % 2:
            raise ValueError(f"rotary dimension {self.rotary_dim} must be even")

    @property
    def rotary_dim(self) -> int:
        return int(self.head_dim * self.partial_rotary_factor)

    @property
    def q_dim(self) -> int:
        return self.num_heads * self.head_dim

    @property
    def kv_dim(self) -> int:
        return self.num_kv_heads * self.head_dim

    def replace(self, **changes) -> ModelConfig:
        return dataclasses.replace(self, **changes)

    def num_params(self) -> int:
        """Parameter count (embeddings counted once when tied)."""
        d, i, layers = self.hidden_size, self.intermediate_size, self.num_layers
        attn = d * self.q_dim + 2 * d * self.kv_dim + self.q_dim * d
        if self.qkv_bias:
            attn += self.q_dim + 2 * self.kv_dim
        norms = (4 if self.sandwich_norms else 2) * d
        per_layer = attn + 3 * d * i + norms
        embed = self.vocab_size * d * (1 if self.tie_word_embeddings else 2)
        return layers * per_layer + embed + d

    # ---- presets -------------------------------------------------------------------------

    @classmethod
    def tiny(cls, family: str = "llama", **overrides) -> ModelConfig:
        """A ~100k-parameter config for tests, in the flavour of `family`."""
        flavours: dict[str, dict[str, Any]] = {
            "llama": dict(tie_word_embeddings=True),
            "qwen2": dict(qkv_bias=True),
            "glm4": dict(
                qkv_bias=True, sandwich_norms=True, partial_rotary_factor=0.5,
                interleaved_rotary=True,
            ),
        }
        base = dict(
            vocab_size=128, hidden_size=64, intermediate_size=128, num_layers=2, num_heads=4,
            num_kv_heads=2, head_dim=16, family=family, max_position_embeddings=512,
        )
        return cls(**{**base, **flavours[family], **overrides})

    # ---- HF conversion -------------------------------------------------------------------

    @classmethod
    def from_hf(cls, hf: dict[str, Any], **overrides) -> ModelConfig:
        """Builds a config from a transformers `config.json` dict."""
        family = hf.get("model_type")
        if family not in ARCHITECTURES:
            raise ValueError(
                f"unsupported model_type {family!r}; supported: {sorted(ARCHITECTURES)}"
            )
        if hf.get("use_sliding_window"):
            raise ValueError("Qwen2 sliding-window attention is not supported")
        if hf.get("mlp_bias"):
            raise ValueError("MLP biases are not supported")
        rope = dict(hf.get("rope_parameters") or hf.get("rope_scaling") or {})
        rope_theta = rope.pop("rope_theta", hf.get("rope_theta", 10000.0))
        partial = rope.pop("partial_rotary_factor", hf.get("partial_rotary_factor", 1.0))
        rope_type = rope.get("rope_type", rope.get("type", "default"))
        if rope_type not in ("default", "llama3"):
            raise ValueError(f"rope type {rope_type!r} is not supported (default, llama3)")
        heads = hf["num_attention_heads"]
        eos = hf.get("eos_token_id")
        fields = dict(
            vocab_size=hf["vocab_size"],
            hidden_size=hf["hidden_size"],
            intermediate_size=hf["intermediate_size"],
            num_layers=hf["num_hidden_layers"],
            num_heads=heads,
            num_kv_heads=hf.get("num_key_value_heads") or heads,
            head_dim=hf.get("head_dim") or hf["hidden_size"] // heads,
            family=family,
            rope_theta=float(rope_theta),
            rope_scaling=tuple(sorted(rope.items())) if rope_type == "llama3" else None,
            partial_rotary_factor=float(partial),
            interleaved_rotary=family == "glm4",
            rms_norm_eps=float(hf.get("rms_norm_eps", 1e-6)),
            # Qwen2 always has q/k/v biases; Llama and GLM-4 say so in `attention_bias`.
            qkv_bias=True if family == "qwen2" else bool(hf.get("attention_bias", False)),
            sandwich_norms=family == "glm4",
            tie_word_embeddings=bool(hf.get("tie_word_embeddings", False)),
            max_position_embeddings=int(hf.get("max_position_embeddings", 8192)),
            bos_token_id=hf.get("bos_token_id"),
            eos_token_id=tuple(eos) if isinstance(eos, list) else eos,
            pad_token_id=hf.get("pad_token_id"),
        )
        fields.update(overrides)
        return cls(**fields)

    def to_hf(self) -> dict[str, Any]:
        """A transformers `config.json` dict for this config."""
        rope: dict[str, Any] = {"rope_theta": self.rope_theta, "rope_type": "default"}
        if self.rope_scaling:
            rope.update(dict(self.rope_scaling))
        if self.family == "glm4":
            rope["partial_rotary_factor"] = self.partial_rotary_factor
        eos = list(self.eos_token_id) if isinstance(self.eos_token_id, tuple) else self.eos_token_id
        hf: dict[str, Any] = {
            "architectures": [ARCHITECTURES[self.family]],
            "model_type": self.family,
            "vocab_size": self.vocab_size,
            "hidden_size": self.hidden_size,
            "intermediate_size": self.intermediate_size,
            "num_hidden_layers": self.num_layers,
            "num_attention_heads": self.num_heads,
            "num_key_value_heads": self.num_kv_heads,
            "head_dim": self.head_dim,
            "hidden_act": "silu",
            "rms_norm_eps": self.rms_norm_eps,
            "rope_parameters": rope,
            "rope_theta": self.rope_theta,
            "tie_word_embeddings": self.tie_word_embeddings,
            "max_position_embeddings": self.max_position_embeddings,
            "bos_token_id": self.bos_token_id,
            "eos_token_id": eos,
            "pad_token_id": self.pad_token_id,
            "torch_dtype": "float32",
        }
        if self.family != "qwen2":
            hf["attention_bias"] = self.qkv_bias
        return hf
