"""LoRA adapters in PEFT's format: `adapter_config.json` + `adapter_model.safetensors`.

PEFT stores, per adapted `nn.Linear` (weight [out, in]), `lora_A.weight` [r, in] and
`lora_B.weight` [r → out, i.e. [out, r]] under `base_model.model.<module path>`, and applies
y = x Wᵀ + (alpha / r) · x Aᵀ Bᵀ. Ours are A [in, r] and B [r, out] per layer with the same
scale, so the tensors are transposes of each other. Only plain LoRA is read: one rank and alpha
for every module (no rank/alpha patterns), no rsLoRA or DoRA, no bias, no saved modules.
GLM-4 fuses gate and up into one HF module, which a rank-r adapter per projection cannot
express, so gate/up adapters of GLM-4 are refused in both directions.
"""

from __future__ import annotations

import json
import os
import pathlib
from typing import Any

import jax
import numpy as np
from safetensors.numpy import load_file, save_file

from agentrl_jax.models import lora as lora_lib
from agentrl_jax.models.config import LoraConfig
from agentrl_jax.models.decoder import Decoder, lora_names

CONFIG_FILE = "adapter_config.json"
WEIGHTS_FILE = "adapter_model.safetensors"
_MODULE = {
    "q_proj": "self_attn.q_proj", "k_proj": "self_attn.k_proj", "v_proj": "self_attn.v_proj",
    "o_proj": "self_attn.o_proj", "gate_proj": "mlp.gate_proj", "up_proj": "mlp.up_proj",
    "down_proj": "mlp.down_proj",
}
_PREFIX = "base_model.model.model.layers."


def _key(layer: int, target: str, which: str) -> str:
    return f"{_PREFIX}{layer}.{_MODULE[target]}.lora_{which}.weight"


def _check_family(family: str, targets) -> None:
    if family == "glm4" and {"gate_proj", "up_proj"} & set(targets):
        raise NotImplementedError(
            "GLM-4 fuses gate_proj and up_proj into one HF module; PEFT adapters on them are "
            "not supported (adapt q/k/v/o/down only)")


def peft_config(lora: LoraConfig, base_model: str | None = None) -> dict[str, Any]:
    """The `adapter_config.json` of adapters `lora`."""
    return {
        "peft_type": "LORA", "task_type": "CAUSAL_LM", "r": lora.rank,
        "lora_alpha": lora.alpha, "target_modules": sorted(lora.targets),
        "lora_dropout": 0.0, "bias": "none", "fan_in_fan_out": False, "use_rslora": False,
        "use_dora": False, "modules_to_save": None, "rank_pattern": {}, "alpha_pattern": {},
        "init_lora_weights": True, "inference_mode": True,
        "base_model_name_or_path": base_model,
    }


def save_adapter(model: Decoder, directory: str | os.PathLike,
                 base_model: str | None = None) -> pathlib.Path:
    """Writes the adapters of `model` (a Decoder with adapters) in PEFT's format."""
    lora = model.cfg.lora
    if lora is None:
        raise ValueError("the model has no adapters")
    _check_family(model.cfg.family, lora.targets)
    directory = pathlib.Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    _, adapters, _ = lora_lib.split(model)
    layers = jax.device_get(adapters["layers"])
    tensors = {}
    for target in lora.targets:
        a_name, b_name = lora_names(target)
        for i in range(model.cfg.num_layers):
            tensors[_key(i, target, "A")] = np.ascontiguousarray(np.asarray(layers[a_name][i]).T)
            tensors[_key(i, target, "B")] = np.ascontiguousarray(np.asarray(layers[b_name][i]).T)
    save_file(tensors, directory / WEIGHTS_FILE, metadata={"format": "pt"})
    (directory / CONFIG_FILE).write_text(json.dumps(peft_config(lora, base_model), indent=2))
    return directory


def read_config(directory: str | os.PathLike) -> LoraConfig:
    """The `LoraConfig` of a PEFT adapter directory; refuses what our adapters cannot express."""
    cfg = json.loads((pathlib.Path(directory) / CONFIG_FILE).read_text())
    problems = []
    if cfg.get("peft_type", "LORA") != "LORA":
        problems.append(f"peft_type {cfg.get('peft_type')!r}")
    for flag in ("use_rslora", "use_dora", "fan_in_fan_out"):
        if cfg.get(flag):
            problems.append(flag)
    if cfg.get("bias", "none") != "none":
        problems.append(f"bias={cfg['bias']!r}")
    for field in ("rank_pattern", "alpha_pattern", "modules_to_save", "layers_to_transform"):
        if cfg.get(field):
            problems.append(field)
    targets = cfg.get("target_modules")
    if not isinstance(targets, list):
        problems.append(f"target_modules={targets!r} (a list of projection names is needed)")
    if problems:
        raise ValueError(f"PEFT adapter in {directory} not supported: {', '.join(problems)}")
    return LoraConfig(rank=int(cfg["r"]), alpha=float(cfg["lora_alpha"]),
                      targets=tuple(t for t in _MODULE if t in targets))


def load_adapter(model: Decoder, directory: str | os.PathLike) -> Decoder:
    """`model` (without adapters) with the PEFT adapter in `directory` (arrays in our layout)."""
    lora = read_config(directory)
    _check_family(model.cfg.family, lora.targets)
    raw = load_file(pathlib.Path(directory) / WEIGHTS_FILE)
    tensors = {k.replace(".default.weight", ".weight"): v for k, v in raw.items()}
    adapted = lora_lib.with_adapters(model, lora)
    graphdef, adapters, base = lora_lib.split(adapted)
    layers = dict(adapters["layers"])
    n = model.cfg.num_layers
    for target in lora.targets:
        for which, name in zip("AB", lora_names(target), strict=True):
            stacked = np.stack([tensors.pop(_key(i, target, which)).T for i in range(n)])
            want = layers[name].shape
            if stacked.shape != want:
                raise ValueError(f"{target} lora_{which}: shape {stacked.shape[1:]} in "
                                 f"{directory}, the model needs {want[1:]}")
            layers[name] = jax.numpy.asarray(stacked, layers[name].dtype)
    if tensors:
        raise ValueError(f"unexpected tensors in {directory}: {sorted(tensors)[:4]}")
    from flax import nnx

    return nnx.merge(graphdef, lora_lib.combine(base, {"layers": layers}))
