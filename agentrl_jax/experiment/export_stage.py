"""The export stage: the trained policy as an HF directory, and a run's files copied to a bucket.

`export.dir` (default `run_dir`/final_model) may be a bucket URL: the directory is written
locally, under the run's local directory, and its files copied there. `export.dtype` is the
weights' dtype on disk (the released checkpoints' bf16, say); "" keeps the model's.
"""

from __future__ import annotations

import os
import pathlib
import shutil

import ml_collections

from agentrl_jax import precision
from agentrl_jax.experiment.policy import Policy
from agentrl_jax.experiment.run_dir import is_url
from agentrl_jax.models.hf_io import save_hf


def export(config: ml_collections.ConfigDict, policy: Policy, local_dir: pathlib.Path) -> str:
    """Writes `policy` to `export.dir`; returns where it went."""
    target = config.export.dir or os.path.join(config.run_dir, "final_model")
    local = local_dir / "final_model" if is_url(target) else pathlib.Path(target)
    shutil.rmtree(local, ignore_errors=True)
    save_hf(policy.model, local, dtype=precision.jax_dtype(config.export.dtype))
    policy.tokenizer.save_pretrained(local)
    if is_url(target):
        copy_files(local, target)
    return target


def copy_files(local: pathlib.Path, url: str) -> None:
    """The plain files of `local` (not its subdirectories) into the bucket folder `url`."""
    from etils import epath

    destination = epath.Path(url)
    destination.mkdir(parents=True, exist_ok=True)
    for path in sorted(local.iterdir()):
        if path.is_file():
            (destination / path.name).write_bytes(path.read_bytes())
