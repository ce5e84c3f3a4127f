"""Where an evaluated or served policy comes from: an HF directory, a model-zoo name, or a
run directory (`RUN_DIR/final_model`, or the parameters of one of its RL checkpoints on the
run's warm-started model).

`resolve_checkpoint` reads what a user names (`--checkpoint`, `--step`) and says what is
missing; `load_checkpoint` loads it. Evaluation, serving and the benchmarks share both.
"""

from __future__ import annotations

import dataclasses
import pathlib

import ml_collections

from agentrl_jax.experiment import policy as policy_lib
from agentrl_jax.experiment.run_dir import RunDir


class CheckpointError(ValueError):
    """A checkpoint or step that does not exist (reported without a traceback)."""


@dataclasses.dataclass(frozen=True)
class Checkpoint:
    """Where the evaluated policy comes from.

    Attributes:
      model_dir: HF directory giving architecture and tokenizer (and the weights, unless `step`).
      step: RL checkpoint step whose parameters replace the directory's weights, or None.
      run_dir: the `launch.local` run directory, when `--checkpoint` named one.
      run_config: that run's config (`RUN_DIR/config.json`), or None.
    """

    model_dir: pathlib.Path
    step: int | None = None
    run_dir: pathlib.Path | None = None
    run_config: ml_collections.ConfigDict | None = None

    def describe(self) -> str:
        if self.run_dir is None:
            return str(self.model_dir)
        return f"{self.run_dir} step {self.step}" if self.step is not None else str(self.model_dir)


def checkpoint_steps(run_dir: pathlib.Path) -> list[int]:
    """The RL checkpoint steps saved in `run_dir/checkpoints` (Orbax's step folders)."""
    directory = run_dir / "checkpoints"
    if not directory.is_dir():
        return []
    return sorted(int(p.name) for p in directory.iterdir() if p.is_dir() and p.name.isdigit())


def resolve_checkpoint(checkpoint: str, step: int | None = None) -> Checkpoint:
    """Interprets `--checkpoint` (and `--step`); raises CheckpointError when it names nothing
    usable."""
    run = RunDir(pathlib.Path(checkpoint).expanduser(), create=False)
    if not run.is_run():
        if step is not None:
            raise CheckpointError(
                f"--step needs a run directory (with checkpoints/), not {checkpoint}")
        from agentrl_jax.models.zoo import resolve_model_dir

        try:
            return Checkpoint(pathlib.Path(resolve_model_dir(checkpoint)))
        except ValueError as error:
            raise CheckpointError(str(error)) from None

    run_dir, config = run.path, run.config()
    final = run_dir / "final_model"
    steps = checkpoint_steps(run_dir)
    if step is None and (final / "config.json").is_file():
        return Checkpoint(final, None, run_dir, config)
    if step is None:
        if not steps:
            raise CheckpointError(f"{run_dir} has neither final_model/ nor RL checkpoints yet")
        step = steps[-1]
    if step not in steps:
        raise CheckpointError(f"{run_dir} has no RL checkpoint at step {step}; it has {steps}")
    # The architecture and tokenizer RL started from: the warm-started policy of the run's
    # `sft` stage (RUN_DIR/sft_model links to it), or the final model (same architecture) if
    # that cache has been cleared.
    candidates = [pathlib.Path(run.stages().get("sft", {}).get("policy_dir", "")),
                  run_dir / "sft_model", final]
    base = next((c for c in candidates if (c / "config.json").is_file()), None)
    if base is None:
        raise CheckpointError(f"{run_dir}: the model RL started from is gone (no sft policy_dir "
                              "in "
                         "stages.json, no final_model/); cannot rebuild the architecture")
    return Checkpoint(base, step, run_dir, config)


def restore_step(policy: policy_lib.Policy, checkpoints_dir: pathlib.Path, step: int) -> None:
    """Replaces `policy.model`'s weights with `state.params` of the RL checkpoint at `step`.

    Only the parameters are read (not the optimizer state), onto the model's own shardings, or
    the first device where it holds host arrays (as after RL, which hands its weights back so).
    """
    import jax
    from flax import nnx

    from agentrl_jax.checkpoint import CheckpointManager

    state = nnx.state(policy.model)
    first_device = jax.sharding.SingleDeviceSharding(jax.devices()[0])
    target = jax.tree.map(
        lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype,
                                       sharding=getattr(x, "sharding", first_device)),
        nnx.to_pure_dict(state))
    with CheckpointManager(checkpoints_dir) as manager:
        params = manager.restore_params(target, step=step)
    nnx.replace_by_pure_dict(state, params)
    nnx.update(policy.model, state)


def load_checkpoint(checkpoint: Checkpoint, parser: str) -> policy_lib.Policy:
    """The policy `checkpoint` names, with `parser` as its tool-call parser."""
    policy = policy_lib.load_policy(checkpoint.model_dir, parser)
    if checkpoint.step is not None:
        assert checkpoint.run_dir is not None
        restore_step(policy, checkpoint.run_dir / "checkpoints", checkpoint.step)
    return policy
