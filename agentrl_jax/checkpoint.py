"""Checkpoints: one Orbax CheckpointManager for everything a killed run needs to resume.

A checkpoint at step s holds three items:
  state        any pytree of arrays (here `rl.train_step.TrainState`: params, optimizer state,
               step, RNG key data), saved sharded and restored onto the shardings of a target;
  data         the state of a grain data iterator (restored into the live iterator in place);
  bookkeeping  JSON: whatever the pipeline needs (policy versions, buffer counters, metrics).

A manager made with `base_fingerprint` (LoRA: the adapters in `state` are only meaningful over
the frozen base they were trained on, `rl.train_step.Trainer.base_fingerprint`) also writes a
fourth item, `base`, and every restore checks it: a checkpoint of another base, or of none, is
refused with `BaseMismatchError` instead of loading adapters onto the wrong weights.

Saves are asynchronous (the step loop continues while arrays are written); `max_to_keep` bounds
disk use, beyond which only the multiples of `keep_period` stay; `restore()` without a step
takes the latest finished checkpoint.

The directory may be a bucket URL (`gs://bucket/run/checkpoints`): URLs go to Orbax untouched
(its `etils.epath` paths handle them); only local paths are made absolute. Pass URLs as strings:
`pathlib.Path` folds the `//` of a scheme. On several processes (`jax.distributed`) every
process makes the same save and restore calls; each writes and reads its own shards.
"""

from __future__ import annotations

import os
from typing import Any

import grain
import jax
import orbax.checkpoint as ocp

from agentrl_jax.models.lora import BaseMismatchError


def abstract_like(tree: Any) -> Any:
    """ShapeDtypeStructs carrying the shardings of `tree`: the restore target of a live state."""

    def one(x):
        return jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=getattr(x, "sharding", None))

    return jax.tree.map(one, tree)


def resolve_directory(directory: str | os.PathLike) -> str:
    """A URL (`scheme://...`) unchanged; a local path made absolute."""
    path = os.fspath(directory)
    if "://" in path:
        return path
    return os.path.abspath(path)


def _pytree_restore(target: Any, partial: bool = False) -> ocp.args.PyTreeRestore:
    abstract = abstract_like(target)
    return ocp.args.PyTreeRestore(
        abstract,
        restore_args=ocp.checkpoint_utils.construct_restore_args(abstract),
        partial_restore=partial,
    )


class CheckpointManager:
    """Thin, typed wrapper over `ocp.CheckpointManager` with our three items."""

    def __init__(
        self,
        directory: str | os.PathLike,
        *,
        max_to_keep: int | None = 3,
        keep_period: int | None = None,
        save_interval_steps: int = 1,
        async_save: bool = True,
        base_fingerprint: str | None = None,
        adapter_config: dict[str, Any] | None = None,
    ):
        """`keep_period`: checkpoints at steps that are multiples of it are kept beyond
        `max_to_keep` (None or 0: none). `adapter_config`: JSON description of the adapters
        (`Trainer.adapter_config()`), stored beside `base_fingerprint` so that an export can
        rebuild them."""
        self.base_fingerprint = base_fingerprint
        self.adapter_config = adapter_config
        options = ocp.CheckpointManagerOptions(
            max_to_keep=max_to_keep,
            keep_period=keep_period or None,
            save_interval_steps=save_interval_steps,
            enable_async_checkpointing=async_save,
            create=True,
        )
        self._manager = ocp.CheckpointManager(
            resolve_directory(directory),
            options=options,
            item_handlers={
                "state": ocp.PyTreeCheckpointHandler(),
                "data": grain.checkpoint.CheckpointHandler(),
                "bookkeeping": ocp.JsonCheckpointHandler(),
                "base": ocp.JsonCheckpointHandler(),
            },
        )

    def save(
        self,
        step: int,
        state: Any,
        *,
        data_iterator: Any | None = None,
        bookkeeping: dict[str, Any] | None = None,
        force: bool = False,
    ) -> bool:
        """Starts saving (asynchronously); False when `save_interval_steps` skips this step."""
        items = {"state": ocp.args.PyTreeSave(state)}
        if data_iterator is not None:
            items["data"] = grain.checkpoint.CheckpointSave(data_iterator)
        if bookkeeping is not None:
            items["bookkeeping"] = ocp.args.JsonSave(bookkeeping)
        if self.base_fingerprint is not None:
            items["base"] = ocp.args.JsonSave({"fingerprint": self.base_fingerprint,
                                               "adapter": self.adapter_config})
        return self._manager.save(step, args=ocp.args.Composite(**items), force=force)

    def restore(
        self,
        target: Any,
        *,
        step: int | None = None,
        data_iterator: Any | None = None,
    ) -> tuple[Any, dict[str, Any] | None]:
        """Restores (state, bookkeeping) at `step` (default: the latest).

        Args:
          target: a live state or `abstract_like(...)` of one: structure, dtypes and shardings
            the arrays are restored onto.
          data_iterator: a grain iterator whose position is restored in place.
        """
        step = self.latest_step() if step is None else step
        if step is None:
            raise FileNotFoundError(f"no checkpoint in {self._manager.directory}")
        saved = set(self._manager.item_metadata(step).keys())
        self._check_base(step, saved)
        items = {"state": _pytree_restore(target)}
        if data_iterator is not None:
            if "data" not in saved:
                raise KeyError(f"checkpoint {step} holds no data-iterator state")
            items["data"] = grain.checkpoint.CheckpointRestore(data_iterator)
        if "bookkeeping" in saved:
            items["bookkeeping"] = ocp.args.JsonRestore()
        restored = self._manager.restore(step, args=ocp.args.Composite(**items))
        return restored["state"], restored.get("bookkeeping") if "bookkeeping" in saved else None

    def restore_params(self, target: Any, *, step: int | None = None) -> Any:
        """Only `state.params` (e.g. for export): the optimizer state is never read."""
        step = self.latest_step() if step is None else step
        if step is None:
            raise FileNotFoundError(f"no checkpoint in {self._manager.directory}")
        self._check_base(step, set(self._manager.item_metadata(step).keys()))
        args = _pytree_restore({"params": target}, partial=True)
        return self._manager.restore(step, args=ocp.args.Composite(state=args))["state"]["params"]

    def saved_base(self, step: int | None = None) -> dict[str, Any] | None:
        """{"fingerprint", "adapter"} stored with checkpoint `step` (default latest), or None."""
        step = self.latest_step() if step is None else step
        if step is None or "base" not in set(self._manager.item_metadata(step).keys()):
            return None
        restored = self._manager.restore(step, args=ocp.args.Composite(base=ocp.args.JsonRestore()))
        return restored["base"]

    def saved_base_fingerprint(self, step: int | None = None) -> str | None:
        """The base fingerprint stored with checkpoint `step` (default latest), or None."""
        saved = self.saved_base(step)
        return None if saved is None else saved["fingerprint"]

    def _check_base(self, step: int, saved: set[str]) -> None:
        stored = self.saved_base_fingerprint(step) if "base" in saved else None
        if stored == self.base_fingerprint:
            return
        where = f"checkpoint {step} in {self._manager.directory}"
        if stored is None:
            assert self.base_fingerprint is not None  # both None returned above
            raise BaseMismatchError(
                f"{where} holds no base fingerprint (not a LoRA run), but this run trains "
                f"adapters over base {self.base_fingerprint[:12]}")
        if self.base_fingerprint is None:
            raise BaseMismatchError(
                f"{where} holds LoRA adapters over base {stored[:12]}; restore it with that "
                f"base's fingerprint (CheckpointManager(base_fingerprint=...))")
        raise BaseMismatchError(
            f"{where} was trained over base {stored[:12]}, not this run's base "
            f"{self.base_fingerprint[:12]}: resuming would put its adapters on other weights")

    def latest_step(self) -> int | None:
        return self._manager.latest_step()

    def all_steps(self) -> list[int]:
        return list(self._manager.all_steps())

    def wait_until_finished(self) -> None:
        self._manager.wait_until_finished()

    def close(self) -> None:
        self._manager.close()

    def __enter__(self) -> CheckpointManager:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
