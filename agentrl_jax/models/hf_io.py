"""Import from and export to Hugging Face checkpoints (`config.json` + safetensors).

Import reads tensor by tensor (single file or sharded with `model.safetensors.index.json`),
stacks each parameter's per-layer slices on the host and places it straight onto its target
sharding, so the host holds at most one stacked parameter beyond the memory-mapped files and a
device never holds more than its shard. Export writes transformers' names and layout back.
"""

from __future__ import annotations

import json
import os
import pathlib
from collections.abc import Callable, Iterator
from typing import Any

import jax
import numpy as np
from flax import nnx
from jax.sharding import Mesh
from safetensors import safe_open
from safetensors.numpy import save_file

from agentrl_jax.models import lora as lora_lib
from agentrl_jax.models.config import ModelConfig
from agentrl_jax.models.decoder import Decoder, LoraParam, init_adapters
from agentrl_jax.parallel import sharding as sharding_lib

# Our per-layer parameter → the HF tensor under `model.layers.{i}.`; linear weights are stored
# [out, in] by HF and [in, out] by us.
_LAYER_NAMES = {
    "input_norm": "input_layernorm.weight",
    "q_proj": "self_attn.q_proj.weight",
    "k_proj": "self_attn.k_proj.weight",
    "v_proj": "self_attn.v_proj.weight",
    "o_proj": "self_attn.o_proj.weight",
    "q_bias": "self_attn.q_proj.bias",
    "k_bias": "self_attn.k_proj.bias",
    "v_bias": "self_attn.v_proj.bias",
    "mlp_norm": "post_attention_layernorm.weight",
    "gate_proj": "mlp.gate_proj.weight",
    "up_proj": "mlp.up_proj.weight",
    "down_proj": "mlp.down_proj.weight",
    "post_attn_norm": "post_self_attn_layernorm.weight",
    "post_mlp_norm": "post_mlp_layernorm.weight",
}
_TRANSPOSED = {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}
# GLM-4 fuses gate and up into one [2·I, D] tensor, gate first.
_GLM_FUSED = "mlp.gate_up_proj.weight"


class SafetensorsCheckpoint:
    """Lazy, memory-mapped access to the tensors of a single-file or sharded checkpoint."""

    def __init__(self, directory: str | os.PathLike):
        self.directory = pathlib.Path(directory)
        index = self.directory / "model.safetensors.index.json"
        if index.exists():
            weight_map = json.loads(index.read_text())["weight_map"]
        else:
            single = self.directory / "model.safetensors"
            if not single.exists():
                raise FileNotFoundError(f"no model.safetensors(.index.json) in {self.directory}")
            with safe_open(single, framework="numpy") as f:
                weight_map = {name: single.name for name in f.keys()}
        self.weight_map: dict[str, str] = weight_map
        self._files: dict[str, Any] = {}  # safetensors' safe_open handles

    def __contains__(self, name: str) -> bool:
        return name in self.weight_map

    def get(self, name: str) -> np.ndarray:
        if name not in self.weight_map:
            raise KeyError(f"tensor {name!r} not in checkpoint {self.directory}")
        file = self.weight_map[name]
        if file not in self._files:
            self._files[file] = safe_open(self.directory / file, framework="numpy")
        return self._files[file].get_tensor(name)


def _layer_tensor(ckpt: SafetensorsCheckpoint, cfg: ModelConfig, name: str, i: int) -> np.ndarray:
    prefix = f"model.layers.{i}."
    if name in ("gate_proj", "up_proj") and prefix + _GLM_FUSED in ckpt:
        gate, up = np.split(ckpt.get(prefix + _GLM_FUSED), 2, axis=0)
        w = gate if name == "gate_proj" else up
    else:
        w = ckpt.get(prefix + _LAYER_NAMES[name])
    return w.T if name in _TRANSPOSED else w


def _hf_value(ckpt: SafetensorsCheckpoint, cfg: ModelConfig, path: tuple[str, ...]) -> np.ndarray:
    """The HF tensor(s) for one of our parameters, in our layout."""
    if path == ("embed",):
        return ckpt.get("model.embed_tokens.weight")
    if path == ("final_norm",):
        return ckpt.get("model.norm.weight")
    if path == ("lm_head",):
        return ckpt.get("lm_head.weight").T
    if path[0] == "layers":
        return np.stack([_layer_tensor(ckpt, cfg, path[1], i) for i in range(cfg.num_layers)])
    raise KeyError(f"no HF tensor for parameter {'.'.join(path)}")


def load_hf(
    directory: str | os.PathLike,
    *,
    mesh: Mesh | None = None,
    rules: sharding_lib.Rules = sharding_lib.DEFAULT_RULES,
    lora_seed: int = 0,
    **config_overrides,
) -> Decoder:
    """Builds a `Decoder` from an HF directory, each parameter placed on its target sharding.

    `config_overrides` replace ModelConfig fields (e.g. `dtype=jnp.bfloat16`); with
    `lora=LoraConfig(...)` the model gets fresh adapters (B = 0, seeded by `lora_seed`).
    """
    directory = pathlib.Path(directory)
    hf_config = json.loads((directory / "config.json").read_text())
    cfg = ModelConfig.from_hf(hf_config, **config_overrides)
    ckpt = SafetensorsCheckpoint(directory)
    # Shapes only: no parameter is allocated before its real value is read.
    model = nnx.eval_shape(lambda: Decoder(cfg, rngs=nnx.Rngs(0)))
    adapters = init_adapters(cfg, jax.random.key(lora_seed)) if cfg.lora else {}
    for path, variable in nnx.iter_graph(model):
        if not isinstance(variable, nnx.Param):
            continue
        names = tuple(str(p) for p in path)
        if isinstance(variable, LoraParam):
            value = np.asarray(adapters[names[-1]])
        else:
            value = _hf_value(ckpt, cfg, names).astype(cfg.param_dtype)
        expected = variable.get_value().shape
        if value.shape != expected:
            raise ValueError(f"{'.'.join(names)}: checkpoint shape {value.shape} != {expected}")
        if mesh is not None:
            placed = jax.device_put(value, sharding_lib.variable_sharding(variable, mesh, rules))
        else:
            placed = jax.device_put(value)
        variable.set_value(placed)
    return model


def _export_tensors(model: Decoder) -> Iterator[tuple[str, np.ndarray]]:
    cfg = model.cfg

    def host(x) -> np.ndarray:
        return np.asarray(jax.device_get(x))

    yield "model.embed_tokens.weight", host(model.embed[...])
    yield "model.norm.weight", host(model.final_norm[...])
    if not cfg.tie_word_embeddings:
        yield "lm_head.weight", host(model.lm_head[...]).T
    stacked = {name: host(v) for name, v in model.layers.stacked().items()}
    for i in range(cfg.num_layers):
        prefix = f"model.layers.{i}."
        for name, value in stacked.items():
            w = value[i].T if name in _TRANSPOSED else value[i]
            if cfg.family == "glm4" and name in ("gate_proj", "up_proj"):
                continue
            yield prefix + _LAYER_NAMES[name], w
        if cfg.family == "glm4":
            fused = np.concatenate([stacked["gate_proj"][i].T, stacked["up_proj"][i].T], axis=0)
            yield prefix + _GLM_FUSED, fused


def save_hf(
    model: Decoder,
    directory: str | os.PathLike,
    *,
    max_shard_bytes: int = 2 * 1024**3,
    dtype: np.dtype | None = None,
    on_shard: Callable[[pathlib.Path], None] | None = None,
) -> pathlib.Path:
    """Writes `model` as an HF checkpoint transformers can load (sharded when large).

    A model with adapters is written merged (W + scale · A B): a plain HF checkpoint.

    Args:
      dtype: cast tensors to this (e.g. ml_dtypes.bfloat16) instead of the parameter dtype.
      on_shard: called with each written shard's path (for progress reporting).
    """
    model = lora_lib.merged(model)
    directory = pathlib.Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    hf_config = model.cfg.to_hf()
    if dtype is not None:
        hf_config["torch_dtype"] = np.dtype(dtype).name
    (directory / "config.json").write_text(json.dumps(hf_config, indent=2))

    # Shards are written as they fill (the host never holds the whole model), under temporary
    # names, and renamed once their count is known.
    written: list[tuple[pathlib.Path, list[str]]] = []
    pending: dict[str, np.ndarray] = {}
    size = total = 0

    def flush():
        nonlocal pending, size
        tmp = directory / f".shard-{len(written):05d}.tmp"
        save_file(pending, tmp, metadata={"format": "pt"})
        written.append((tmp, list(pending)))
        pending, size = {}, 0

    for name, value in _export_tensors(model):
        value = np.ascontiguousarray(value if dtype is None else value.astype(dtype))
        if pending and size + value.nbytes > max_shard_bytes:
            flush()
        pending[name] = value
        size += value.nbytes
        total += value.nbytes
    flush()

    if len(written) == 1:
        final = directory / "model.safetensors"
        written[0][0].replace(final)
        if on_shard:
            on_shard(final)
        return directory
    weight_map = {}
    for k, (tmp, names) in enumerate(written, start=1):
        final = directory / f"model-{k:05d}-of-{len(written):05d}.safetensors"
        tmp.replace(final)
        weight_map.update({name: final.name for name in names})
        if on_shard:
            on_shard(final)
    index = {"metadata": {"total_size": total}, "weight_map": weight_map}
    (directory / "model.safetensors.index.json").write_text(json.dumps(index, indent=2))
    return directory
