"""The warm start: the policy trained on the oracles' demonstrations, cached by what decides it.

`warm_start` returns the HF directory of the warm-started policy: `sft.cache_dir` (default
`cache_root()/sft`) / `sft_key(...)`, trained now unless a run before (this one or another)
left it there. With `sft.copy.sequences`, a copy stage comes first (`sft/copy_stage.py`). The
result is written under a temporary name and renamed when complete, so a killed run never
leaves a partial policy in the cache.
"""

from __future__ import annotations

import hashlib
import json
import pathlib
import shutil

import ml_collections
from jax.sharding import Mesh
from tqdm import tqdm

from agentrl_jax import precision
from agentrl_jax.cache_dirs import cache_root
from agentrl_jax.experiment import policy as policy_lib
from agentrl_jax.experiment.metrics import MetricsLog
from agentrl_jax.sft import copy_stage, copy_swap
from agentrl_jax.sft import demos as demos_lib
from agentrl_jax.sft import stage as sft_stage


def sft_key(config: ml_collections.ConfigDict, demo_paths: list[pathlib.Path]) -> str:
    """What decides the warm-started policy; equal keys share one cached result. An unset (None)
    SFT setting is left out, so adding one keeps the keys of the policies cached before it; an
    "auto" compute dtype counts as what it resolves to on this host."""
    sft = {**config.sft.to_dict(),
           "compute_dtype": precision.resolve(config.sft.get("compute_dtype"))}
    material = json.dumps({
        "model": config.model.to_dict(),
        "sft": {k: v for k, v in sft.items() if k != "cache_dir" and v is not None},
        "demos": [p.name for p in demo_paths], "max_tokens": config.demos.max_tokens,
        "texts": demos_lib.TEXTS_FORMAT,
    }, sort_keys=True, default=str)
    return hashlib.sha256(material.encode()).hexdigest()[:16]


def step_progress(desc: str, stage: str, metrics: MetricsLog) -> sft_stage.StepCallback:
    """A step callback that shows a progress bar and logs the step's metrics under `stage`."""
    bar = tqdm(desc=desc, unit="step")

    def on_step(step: int, total: int, values: dict[str, float]) -> None:
        bar.total = total
        bar.update(1)
        bar.set_postfix(nll=f"{values['loss']:.3f}")
        metrics.write(stage, step, values)
        if step == total:
            bar.close()

    return on_step


def warm_start(config: ml_collections.ConfigDict, demo_paths: list[pathlib.Path],
               mesh: Mesh, metrics: MetricsLog) -> pathlib.Path:
    """The HF directory of the warm-started policy, trained now unless cached."""
    target = pathlib.Path(config.sft.cache_dir or cache_root() / "sft") / sft_key(config,
                                                                                  demo_paths)
    if (target / "config.json").exists():
        print(f"warm start: cached {target}")
        return target
    demos = list(demos_lib.read_demos(demo_paths))
    if config.model.source == "scratch":
        policy = policy_lib.new_scratch_policy(config.model, demos_lib.demo_texts(demos))
    else:
        policy = policy_lib.pretrained_policy(config.model, demos_lib.demo_texts(demos))
    trained = copy_swap.with_swaps(demos, config.sft.copy_swap_fraction, config.sft.seed)
    trajectories = [demos_lib.demo_trajectory(policy.tokenizer, d, policy.end_of_turn_ids,
                                              config.sft.context_loss_weight) for d in trained]
    kept = [t for t in trajectories if len(t) <= config.demos.max_tokens]
    print(f"warm start: {len(kept)} demonstrations ({len(trajectories) - len(kept)} longer than "
          f"{config.demos.max_tokens} tokens left out), {sum(map(len, kept))} tokens, "
          f"{policy.model.cfg.num_params() / 1e6:.1f}M parameters")
    if config.sft.copy.sequences:
        copies = copy_stage.copy_sequences(kept, config.sft.copy, config.sft.seed)
        sft_stage.run_sft(policy.model, copies, copy_stage.stage_config(config.sft), mesh,
                          step_progress("warm start (copy stage)", "sft_copy", metrics))
    sft_stage.run_sft(policy.model, kept, config.sft, mesh,
                      step_progress("warm start (SFT)", "sft", metrics))
    partial = target.with_name(target.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    policy_lib.save_policy(policy, partial)
    target.parent.mkdir(parents=True, exist_ok=True)
    partial.rename(target)
    return target
