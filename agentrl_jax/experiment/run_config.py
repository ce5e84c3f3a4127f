"""The run's config, resolved once and then frozen.

`resolve(config)` checks what can be checked before anything starts and computes the values
derived from others, in one place:

  rl.trainer.temperature   the sampler's (`rl.sampling.temperature`; greedy records at 1): the
                           trainer's log-probs must be the behaviour policy's
                           (`pipeline.trainer_driver.trainer_config`)
  eval.sampling            the sampling settings evaluation plays at: RL's, with
                           `eval.temperature` where the config sets one
  rl.checkpoint.keep_period  with `eval.select_every` (`experiment/selection.py`), that
                           interval, so the checkpoints compared on validation are kept

and returns an `ml_collections.FrozenConfigDict`: no stage can change a setting another stage
reads. The run writes exactly this config to `RUN_DIR/config.json`.
"""

from __future__ import annotations

import ml_collections

from agentrl_jax.dataclass_config import mutable_copy
from agentrl_jax.experiment.selection import check_selection
from agentrl_jax.pipeline.trainer_driver import trainer_config
from agentrl_jax.rl.train_step import lora_of


def resolve(config: ml_collections.ConfigDict) -> ml_collections.FrozenConfigDict:
    """The checked config with its derived values, frozen. Raises ValueError on a setting
    that contradicts another (a trainer temperature apart from the sampler's)."""
    if isinstance(config, ml_collections.FrozenConfigDict):
        return config
    resolved = mutable_copy(config)
    with resolved.unlocked():
        if "rl" in resolved:
            resolved.rl.trainer = trainer_config(resolved.rl)
        if "eval" in resolved and "rl" in resolved:
            sampling = resolved.rl.sampling.to_dict()
            if resolved.eval.get("temperature") is not None:
                sampling["temperature"] = float(resolved.eval.temperature)
            resolved.eval.sampling = sampling
            select_every = int(resolved.eval.get("select_every", 0))
            if select_every:
                _resolve_selection(resolved, select_every)
    return ml_collections.FrozenConfigDict(resolved)


def _resolve_selection(config: ml_collections.ConfigDict, select_every: int) -> None:
    """Checks `eval.select_every` against the checkpoints and sets their `keep_period`."""
    if config.get("deployment", "local") != "local":
        raise ValueError("eval.select_every chooses among a local run's checkpoints; a pod "
                         "run resumes from its latest, so leave it 0 there")
    if lora_of(config.rl.trainer) is not None:
        raise ValueError("eval.select_every restores full parameters from checkpoints; with "
                         "LoRA (rl.trainer.lora) they hold adapters only, so leave it 0")
    checkpoint = config.rl.checkpoint
    check_selection(select_every, int(checkpoint.every), int(checkpoint.get("keep_period", 0)))
    checkpoint.keep_period = int(checkpoint.get("keep_period", 0)) or select_every
