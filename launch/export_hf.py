"""Exports trained parameters from an Orbax checkpoint as a Hugging Face checkpoint.

  python -m launch.export_hf --checkpoint_dir=runs/x/ckpt --base_model=/models/SmolLM2-135M \\
      --out=exported/ [--step=N] [--dtype=bfloat16]

The architecture comes from the base model's `config.json` (the model training started from);
its tokenizer and generation files are copied alongside, so `transformers` loads the result
with `AutoModelForCausalLM.from_pretrained(out)` and `AutoTokenizer.from_pretrained(out)`.
Only `state.params` is read from the checkpoint, onto the host, never the optimizer state.

A LoRA run's checkpoint (`trainer.lora`) holds adapters: `--lora` checks that `--base_model`
is the base they were trained over (its fingerprint) and writes both the merged model (to
`--out`) and the adapter alone in PEFT's format (to `--out/adapter`, which
`peft.PeftModel.from_pretrained(base, out/adapter)` loads).
"""

from __future__ import annotations

import json
import pathlib
import shutil
from collections.abc import Sequence

import jax
import ml_dtypes
import numpy as np
from absl import app, flags
from flax import nnx

from agentrl_jax import compile_cache
from agentrl_jax.checkpoint import BaseMismatchError, CheckpointManager
from agentrl_jax.models import lora as lora_lib
from agentrl_jax.models import peft_io
from agentrl_jax.models.config import LoraConfig, ModelConfig
from agentrl_jax.models.decoder import Decoder
from agentrl_jax.models.hf_io import load_hf, save_hf

# Files of an HF model directory that are not weights and that an exported model should keep.
_SIDE_FILES = (
    "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.json",
    "merges.txt", "tokenizer.model", "added_tokens.json", "generation_config.json",
    "chat_template.jinja", "chat_template.json",
)
_DTYPES = {"float32": np.float32, "bfloat16": ml_dtypes.bfloat16, "float16": np.float16}


def export_params(
    params, cfg: ModelConfig, out: str | pathlib.Path, dtype: str | None = None
) -> pathlib.Path:
    """Writes a pure params pytree (as held by `TrainState.params`) as an HF checkpoint."""
    graphdef, _ = nnx.split(nnx.eval_shape(lambda: Decoder(cfg, rngs=nnx.Rngs(0))))
    model = nnx.merge(graphdef, jax.device_get(params))
    return save_hf(model, out, dtype=_DTYPES[dtype] if dtype else None)


def export_checkpoint(
    checkpoint_dir: str | pathlib.Path,
    base_model: str | pathlib.Path,
    out: str | pathlib.Path,
    *,
    step: int | None = None,
    dtype: str | None = None,
) -> pathlib.Path:
    """Exports `state.params` at `step` (default: latest) with `base_model`'s config."""
    base_model = pathlib.Path(base_model)
    cfg = ModelConfig.from_hf(json.loads((base_model / "config.json").read_text()))
    _, abstract = nnx.split(nnx.eval_shape(lambda: Decoder(cfg, rngs=nnx.Rngs(0))))
    abstract = nnx.to_pure_dict(abstract)
    host = jax.sharding.SingleDeviceSharding(jax.devices("cpu")[0])
    target = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=host), abstract)
    with CheckpointManager(checkpoint_dir) as manager:
        params = manager.restore_params(target, step=step)
    out = export_params(params, cfg, out, dtype)
    for name in _SIDE_FILES:
        if (base_model / name).exists():
            shutil.copy2(base_model / name, out / name)
    return out


def export_lora_checkpoint(
    checkpoint_dir: str | pathlib.Path,
    base_model: str | pathlib.Path,
    out: str | pathlib.Path,
    *,
    step: int | None = None,
    dtype: str | None = None,
) -> tuple[pathlib.Path, pathlib.Path]:
    """Exports a LoRA checkpoint as (merged HF checkpoint `out`, PEFT adapter `out/adapter`)."""
    base_model, out = pathlib.Path(base_model), pathlib.Path(out)
    with CheckpointManager(checkpoint_dir) as manager:
        saved = manager.saved_base(step)
    if saved is None or not saved.get("adapter"):
        raise BaseMismatchError(f"{checkpoint_dir} holds no LoRA adapters (export it without "
                                "--lora)")
    spec = saved["adapter"]
    lora = LoraConfig(rank=int(spec["rank"]), alpha=float(spec["alpha"]),
                      targets=tuple(spec["targets"]))
    base = load_hf(base_model)
    # The fingerprint is of the base as training held it.
    frozen = lora_lib.cast_base(nnx.to_pure_dict(nnx.state(base)), spec.get("base_dtype"))
    host = jax.sharding.SingleDeviceSharding(jax.devices("cpu")[0])
    graphdef, adapters, base_params = lora_lib.split(lora_lib.with_adapters(base, lora))
    target = {"layers": {name: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=host)
                         for name, x in adapters["layers"].items()}}
    fingerprint = lora_lib.base_fingerprint(frozen)
    with CheckpointManager(checkpoint_dir, base_fingerprint=fingerprint) as manager:
        params = manager.restore_params(target, step=step)
    model = nnx.merge(graphdef, lora_lib.combine(base_params, jax.device_get(params)))
    save_hf(model, out, dtype=_DTYPES[dtype] if dtype else None)  # merged
    for name in _SIDE_FILES:
        if (base_model / name).exists():
            shutil.copy2(base_model / name, out / name)
    adapter = peft_io.save_adapter(model, out / "adapter", base_model=str(base_model))
    return out, adapter


FLAGS = flags.FLAGS
flags.DEFINE_string("checkpoint_dir", None, "Orbax checkpoint directory of a training run.")
flags.DEFINE_string("base_model", None, "HF directory of the model training started from.")
flags.DEFINE_string("out", None, "Output directory.")
flags.DEFINE_integer("step", None, "Checkpoint step (default: latest).")
flags.DEFINE_enum("dtype", None, list(_DTYPES), "Cast the exported tensors (default: as trained).")
flags.DEFINE_bool("lora", False, "The checkpoint holds LoRA adapters: write the merged model "
                  "and the PEFT adapter (out/adapter).")


def main(argv: Sequence[str]) -> None:
    del argv
    compile_cache.enable()
    if FLAGS.lora:
        out, adapter = export_lora_checkpoint(
            FLAGS.checkpoint_dir, FLAGS.base_model, FLAGS.out, step=FLAGS.step, dtype=FLAGS.dtype)
        print(f"exported merged model to {out}, PEFT adapter to {adapter}")
        return
    out = export_checkpoint(
        FLAGS.checkpoint_dir, FLAGS.base_model, FLAGS.out, step=FLAGS.step, dtype=FLAGS.dtype
    )
    print(f"exported to {out}")


if __name__ == "__main__":
    flags.mark_flags_as_required(["checkpoint_dir", "base_model", "out"])
    app.run(main)
