"""The policy of a run: model, tokenizer and chat format, from the `model` part of a config.

    model.source = "scratch"   a new model of `model.scratch` dims; its tokenizer is trained on
                               the run's demonstrations (`chat.scratch_tokenizer`)
                 = "zoo"       a named model of `models.zoo` (e.g. smollm2-135m-instruct)
                 = "hf"        an HF checkpoint directory `model.path` (Qwen2.5, GLM-4, Llama)
"""

from __future__ import annotations

import dataclasses
import pathlib
from collections.abc import Iterable
from typing import Any

import jax.numpy as jnp
import ml_collections
from flax import nnx
from jax.sharding import Mesh

from agentrl_jax import stage_clock
from agentrl_jax.models.config import ModelConfig
from agentrl_jax.models.decoder import Decoder


def default_config() -> ml_collections.ConfigDict:
    return ml_collections.ConfigDict(dict(
        source="scratch",  # scratch | zoo | hf
        name="smollm2-135m-instruct",  # for source=zoo
        path="",  # for source=hf
        parser="hermes",  # tool-call format: hermes | qwen25 | glm4
        vocab_size=4096,  # scratch: BPE entries, specials included
        # zoo/hf in launch.local's warm start: keep the first N decoder layers and the
        # vocabulary of the demonstrations (models/shrink.py); 0 = the whole model
        shrink_layers=0,
        # with shrink_layers: the tokenizer's first N ids (its most frequent tokens) are kept
        # too, so that names the demonstrations never had encode as in pretraining; at the
        # vocabulary's size (49152 for SmolLM2) nothing is pruned
        shrink_common_tokens=0,
        scratch=dict(family="llama", hidden_size=256, intermediate_size=768, num_layers=4,
                     num_heads=4, num_kv_heads=2, head_dim=64, max_position_embeddings=4096,
                     tie_word_embeddings=True, rope_theta=10000.0),
        seed=0,
    ))


@dataclasses.dataclass
class Policy:
    model: Decoder
    tokenizer: Any
    parser: str

    @property
    def end_of_turn_ids(self) -> tuple[int, ...]:
        return (int(self.tokenizer.eos_token_id),)


def scratch_model_config(config: ml_collections.ConfigDict, tokenizer: Any) -> ModelConfig:
    return ModelConfig(vocab_size=len(tokenizer), eos_token_id=tokenizer.eos_token_id,
                       pad_token_id=tokenizer.pad_token_id, dtype=jnp.float32,
                       **config.scratch.to_dict())


def new_scratch_policy(config: ml_collections.ConfigDict, texts: Iterable[str]) -> Policy:
    """A freshly initialised model with a tokenizer trained on `texts`."""
    from agentrl_jax.chat.scratch_tokenizer import train_chat_tokenizer

    tokenizer = train_chat_tokenizer(texts, config.vocab_size)
    cfg = scratch_model_config(config, tokenizer)
    return Policy(Decoder(cfg, rngs=nnx.Rngs(config.seed)), tokenizer, config.parser)


def pretrained_policy(config: ml_collections.ConfigDict, texts: Iterable[str]) -> Policy:
    """The `zoo` or `hf` policy; with `shrink_layers`, its first layers over the vocabulary of
    `texts` (`models.shrink`), made in a temporary directory and loaded from there."""
    if not config.shrink_layers:
        return load_policy(pretrained_dir(config), config.parser)
    import tempfile

    from agentrl_jax.models.shrink import shrink_pretrained

    with tempfile.TemporaryDirectory(prefix="agentrl_jax-shrunk-") as shrunk:
        shrink_pretrained(pretrained_dir(config), shrunk, num_layers=config.shrink_layers,
                          texts=texts, common_tokens=config.shrink_common_tokens)
        return load_policy(shrunk, config.parser)


def load_policy(directory: str | pathlib.Path, parser: str, mesh: Mesh | None = None) -> Policy:
    """A policy from an HF directory holding both weights and tokenizer."""
    from transformers import AutoTokenizer

    from agentrl_jax.models.hf_io import load_hf

    return Policy(load_hf(directory, mesh=mesh), AutoTokenizer.from_pretrained(directory), parser)


def pretrained_dir(config: ml_collections.ConfigDict) -> pathlib.Path:
    """The HF directory of a `zoo` or `hf` policy (converting a zoo model on first use)."""
    if config.source == "zoo":
        from agentrl_jax.models.zoo import resolve_model_dir

        return pathlib.Path(resolve_model_dir(config.name))
    if config.source == "hf":
        if not config.path:
            raise ValueError("model.source='hf' needs model.path, an HF checkpoint directory")
        return pathlib.Path(config.path)
    raise ValueError(f"model.source must be scratch, zoo or hf, not {config.source!r}")


def save_policy(policy: Policy, directory: str | pathlib.Path) -> pathlib.Path:
    """Weights and tokenizer as one HF directory (loadable by `load_policy` and transformers)."""
    from agentrl_jax.models.hf_io import save_hf

    directory = pathlib.Path(directory)
    with stage_clock.span("checkpoint"):
        save_hf(policy.model, directory)
        policy.tokenizer.save_pretrained(directory)
    return directory
