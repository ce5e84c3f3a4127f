"""LoRA adapters in PEFT's format: `adapter_config.json` + `adapter_model.safetensors`.

PEFT stores, per adapted `nn.Linear` (weight [out, in]), `lora_A.weight` [r, in] and
`lora_B.weight` [r → out, i.e. [out, r]] under `base_model.model.<module path>`, and applies
y = x Wᵀ + (alpha / r) · x Aᵀ Bᵀ. Ours are A [in, r] and B [r, out] per layer with the same
scale, so the tensors are transposes of each other. Only plain LoRA is read: one rank and alpha
for every module (no rank/alpha patterns, except GLM-4's below), no rsLoRA or DoRA, no bias, no
saved modules.

GLM-4 fuses gate and up into one HF module, `mlp.gate_up_proj` (out = [gate; up]), so PEFT
holds one A [r, in] and one B [2·I, r] there, while we keep a rank-r adapter per projection:
  * export: A = [A_gate | A_up]ᵀ and B the block diagonal of B_gate, B_up, a rank-2r adapter
    of that module (`rank_pattern`, with `alpha_pattern` 2·alpha, so the scale is the same);
    with one of the two targeted, rank r with that half of B zero. Exact either way.
  * import: a rank-r fused adapter gives both projections its A and each its half of B (so
    the same function); a rank-2r one must be block diagonal (ours, exported) and splits back.
    Its scale may differ from the other modules': it is folded into B.
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
_FUSED = "gate_up_proj"  # GLM-4's fused gate and up module (mlp.gate_up_proj)
_MODULE_FUSED = "mlp.gate_up_proj"
_GATE_UP = ("gate_proj", "up_proj")


def _key(layer: int, target: str, which: str) -> str:
    module = _MODULE_FUSED if target == _FUSED else _MODULE[target]
    return f"{_PREFIX}{layer}.{module}.lora_{which}.weight"


def _fuses(family: str | None, targets) -> bool:
    """Whether gate/up adapters of this family live on GLM-4's fused HF module."""
    return family == "glm4" and bool(set(_GATE_UP) & set(targets))


def peft_config(lora: LoraConfig, base_model: str | None = None,
                family: str | None = None) -> dict[str, Any]:
    """The `adapter_config.json` of adapters `lora` (on a model of `family`)."""
    targets, rank_pattern, alpha_pattern = set(lora.targets), {}, {}
    if _fuses(family, targets):
        targets = (targets - set(_GATE_UP)) | {_FUSED}
        if set(_GATE_UP) <= set(lora.targets):  # the rank-2r block-diagonal form
            rank_pattern, alpha_pattern = {_FUSED: 2 * lora.rank}, {_FUSED: 2 * lora.alpha}
    return {
        "peft_type": "LORA", "task_type": "CAUSAL_LM", "r": lora.rank,
        "lora_alpha": lora.alpha, "target_modules": sorted(targets),
        "lora_dropout": 0.0, "bias": "none", "fan_in_fan_out": False, "use_rslora": False,
        "use_dora": False, "modules_to_save": None, "rank_pattern": rank_pattern,
        "alpha_pattern": alpha_pattern, "init_lora_weights": True, "inference_mode": True,
        "base_model_name_or_path": base_model,
    }


def _fused_tensors(layers: dict[str, Any], lora: LoraConfig, i: int
                   ) -> tuple[np.ndarray, np.ndarray]:
    """PEFT's (A [R, in], B [2I, R]) of GLM-4's gate_up_proj in layer `i` (see the module
    docstring): rank 2r when both projections are adapted, else r."""
    rank = lora.rank
    a_blocks: list[np.ndarray] = []
    b_halves: list[np.ndarray | None] = []
    for target in _GATE_UP:
        a_name, b_name = lora_names(target)
        if target in lora.targets:
            a_blocks.append(np.asarray(layers[a_name][i]))  # [in, r]
            b_halves.append(np.asarray(layers[b_name][i]))  # [r, I]
        else:
            b_halves.append(None)
    inter = next(b.shape[1] for b in b_halves if b is not None)
    a = np.concatenate(a_blocks, axis=1)  # [in, R]
    b = np.zeros((a.shape[1], 2 * inter), a.dtype)  # [R, 2I]: block diagonal
    row = 0
    for half, block in enumerate(b_halves):
        if block is not None:
            b[row:row + rank, half * inter:(half + 1) * inter] = block
            row += rank
    return np.ascontiguousarray(a.T), np.ascontiguousarray(b.T)


def save_adapter(model: Decoder, directory: str | os.PathLike,
                 base_model: str | None = None) -> pathlib.Path:
    """Writes the adapters of `model` (a Decoder with adapters) in PEFT's format."""
    lora = model.cfg.lora
    if lora is None:
        raise ValueError("the model has no adapters")
    family = model.cfg.family
    directory = pathlib.Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    _, adapters, _ = lora_lib.split(model)
    layers = jax.device_get(adapters["layers"])
    tensors = {}
    fused = _fuses(family, lora.targets)
    for i in range(model.cfg.num_layers):
        for target in lora.targets:
            if fused and target in _GATE_UP:
                continue
            a_name, b_name = lora_names(target)
            tensors[_key(i, target, "A")] = np.ascontiguousarray(np.asarray(layers[a_name][i]).T)
            tensors[_key(i, target, "B")] = np.ascontiguousarray(np.asarray(layers[b_name][i]).T)
        if fused:
            tensors[_key(i, _FUSED, "A")], tensors[_key(i, _FUSED, "B")] = _fused_tensors(
                layers, lora, i)
    save_file(tensors, directory / WEIGHTS_FILE, metadata={"format": "pt"})
    config = peft_config(lora, base_model, family)
    (directory / CONFIG_FILE).write_text(json.dumps(config, indent=2))
    return directory


def _fused_scale(cfg: dict[str, Any]) -> float:
    """alpha / rank of the fused gate_up_proj module in a PEFT adapter config."""
    rank = (cfg.get("rank_pattern") or {}).get(_FUSED, cfg["r"])
    return float((cfg.get("alpha_pattern") or {}).get(_FUSED, cfg["lora_alpha"])) / int(rank)


def read_config(directory: str | os.PathLike) -> LoraConfig:
    """The `LoraConfig` of a PEFT adapter directory; refuses what our adapters cannot express.

    An adapter on GLM-4's fused `gate_up_proj` targets our gate_proj and up_proj; only that
    module may have a rank or alpha pattern.
    """
    cfg = json.loads((pathlib.Path(directory) / CONFIG_FILE).read_text())
    problems = []
    for field in ("rank_pattern", "alpha_pattern"):
        if set(cfg.get(field) or {}) - {_FUSED}:
            problems.append(field)
    if cfg.get("peft_type", "LORA") != "LORA":
        problems.append(f"peft_type {cfg.get('peft_type')!r}")
    for flag in ("use_rslora", "use_dora", "fan_in_fan_out"):
        if cfg.get(flag):
            problems.append(flag)
    if cfg.get("bias", "none") != "none":
        problems.append(f"bias={cfg['bias']!r}")
    for field in ("modules_to_save", "layers_to_transform"):
        if cfg.get(field):
            problems.append(field)
    targets = cfg.get("target_modules")
    if not isinstance(targets, list):
        problems.append(f"target_modules={targets!r} (a list of projection names is needed)")
    if problems:
        raise ValueError(f"PEFT adapter in {directory} not supported: {', '.join(problems)}")
    targets = set(targets) | (set(_GATE_UP) if _FUSED in targets else set())
    return LoraConfig(rank=int(cfg["r"]), alpha=float(cfg["lora_alpha"]),
                      targets=tuple(t for t in _MODULE if t in targets))


def _split_fused(a: np.ndarray, b: np.ndarray, rank: int, ratio: float, where: str
                 ) -> dict[str, np.ndarray]:
    """Our gate/up adapters {name: array} of one layer from PEFT's fused (A [R, in],
    B [2I, R]), B scaled by `ratio` (the fused module's scale over ours)."""
    inter, fused_rank = b.shape[0] // 2, a.shape[0]
    b = b * np.asarray(ratio, b.dtype)
    gate_b, up_b = b[:inter], b[inter:]
    if fused_rank == rank:  # one A for both: each projection gets it and its half of B
        parts = {"gate_proj": (a, gate_b), "up_proj": (a, up_b)}
    elif fused_rank == 2 * rank and not gate_b[:, rank:].any() and not up_b[:, :rank].any():
        parts = {"gate_proj": (a[:rank], gate_b[:, :rank]),
                 "up_proj": (a[rank:], up_b[:, rank:])}
    else:
        raise ValueError(f"{where}: a rank-{fused_rank} adapter of GLM-4's gate_up_proj is "
                         f"not two rank-{rank} adapters of gate and up (rank {rank}, or 2·{rank} "
                         "block diagonal, is needed)")
    out = {}
    for target, (pa, pb) in parts.items():
        a_name, b_name = lora_names(target)
        out[a_name], out[b_name] = pa.T, pb.T
    return out


def load_adapter(model: Decoder, directory: str | os.PathLike) -> Decoder:
    """`model` (without adapters) with the PEFT adapter in `directory` (arrays in our layout)."""
    lora = read_config(directory)
    raw = load_file(pathlib.Path(directory) / WEIGHTS_FILE)
    tensors = {k.replace(".default.weight", ".weight"): v for k, v in raw.items()}
    adapted = lora_lib.with_adapters(model, lora)
    graphdef, adapters, base = lora_lib.split(adapted)
    layers = dict(adapters["layers"])
    n = model.cfg.num_layers
    per_layer: list[dict[str, np.ndarray]] = [{} for _ in range(n)]
    fused = any(_FUSED in k for k in tensors)
    if fused:
        if model.cfg.family != "glm4":
            raise ValueError(f"{directory} adapts gate_up_proj, which only GLM-4 has")
        cfg = json.loads((pathlib.Path(directory) / CONFIG_FILE).read_text())
        ratio = _fused_scale(cfg) / lora.scale
        for i in range(n):
            a, b = tensors.pop(_key(i, _FUSED, "A")), tensors.pop(_key(i, _FUSED, "B"))
            per_layer[i] = _split_fused(a, b, lora.rank, ratio, f"{directory} layer {i}")
    for target in lora.targets:
        for which, name in zip("AB", lora_names(target), strict=True):
            stacked = np.stack([per_layer[i][name] if name in per_layer[i]
                                else tensors.pop(_key(i, target, which)).T for i in range(n)])
            want = layers[name].shape
            if stacked.shape != want:
                raise ValueError(f"{target} lora_{which}: shape {stacked.shape[1:]} in "
                                 f"{directory}, the model needs {want[1:]}")
            layers[name] = jax.numpy.asarray(stacked, layers[name].dtype)
    if tensors:
        raise ValueError(f"unexpected tensors in {directory}: {sorted(tensors)[:4]}")
    from flax import nnx

    return nnx.merge(graphdef, lora_lib.combine(base, {"layers": layers}))
