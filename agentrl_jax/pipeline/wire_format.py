"""How rollouts and weights travel between the trainer and out-of-process sampling workers.

Rollouts go as JSON (token lists and per-token fields); weights as one safetensors blob of the
sampler-layout arrays with flat `a.b` names, which any worker can map straight onto its own
shardings.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from safetensors.numpy import load as load_safetensors
from safetensors.numpy import save as save_safetensors

from agentrl_jax.episode import SampleStatus
from agentrl_jax.rollout.record import Rollout

_ARRAYS = {"tokens": np.int32, "loss_mask": np.int32, "logprobs": np.float32,
           "versions": np.int32, "policy_ids": np.int32}


def rollout_to_json(r: Rollout) -> dict[str, Any]:
    out = {name: getattr(r, name).tolist() for name in _ARRAYS}
    out.update(task=r.task, index=r.index, group_id=r.group_id, member=r.member,
               reward=r.reward, status=str(r.status), num_turns=r.num_turns,
               metrics=r.metrics, error=r.error)
    return out


def rollout_from_json(d: dict[str, Any]) -> Rollout:
    arrays: dict[str, Any] = {name: np.asarray(d[name], dtype) for name, dtype in _ARRAYS.items()}
    lengths = {a.shape for a in arrays.values()}
    if len(lengths) != 1 or len(next(iter(lengths))) != 1:
        raise ValueError(f"per-token fields of unequal or non-flat shapes: {lengths}")
    return Rollout(task=str(d["task"]), index=d["index"], group_id=int(d["group_id"]),
                   member=int(d["member"]), **arrays, reward=float(d["reward"]),
                   status=SampleStatus.parse(d["status"]), num_turns=int(d["num_turns"]),
                   metrics=dict(d.get("metrics") or {}), error=d.get("error"))


def flatten(tree: dict[str, Any], prefix: str = "") -> dict[str, np.ndarray]:
    out = {}
    for key, value in tree.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(flatten(value, name + "."))
        else:
            out[name] = np.asarray(value)
    return out


def unflatten(flat: dict[str, np.ndarray]) -> dict[str, Any]:
    tree: dict[str, Any] = {}
    for name, value in flat.items():
        node = tree
        *parents, leaf = name.split(".")
        for p in parents:
            node = node.setdefault(p, {})
        node[leaf] = value
    return tree


def weights_to_bytes(weights: dict[str, Any]) -> bytes:
    return save_safetensors(flatten(weights))


def weights_from_bytes(blob: bytes) -> dict[str, Any]:
    return unflatten(load_safetensors(blob))
