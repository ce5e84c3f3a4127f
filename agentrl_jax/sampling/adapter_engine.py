"""Serving LoRA policies: every policy is an adapter over one base, kept once, applied unmerged.

The engine's model has adapters (`ModelConfig.lora`), so its compiled steps compute
`x W + scale · (x A) B` for the targeted projections (`decoder.block`). This front end keeps the
base in the sampler layout once and installs each policy as that same base plus its own
adapter arrays: a weight update carries, places and splits only the adapter, and the stale
policy of cross-policy sampling costs one more adapter, not a second copy of the model.
(Merging W + scale · A B into a kept base copy at each sync would instead write a full copy of
the weights per update and per policy; decode speed of the two is in benchmarks/lora.py.)

Verified delivery: `receive(policy, update)` places the update's arrays on the sampler's
devices, reads them back and compares their digest (`tree_digest`) with the checksum the
trainer computed before sending. A mismatch (corrupted in transit or in placement) is refused
and the policy keeps serving its previous version; a match is installed and the sampler answers
with the (version, checksum) it now serves, which the sender checks (`weight_sync.deliver`).
"""

from __future__ import annotations

from typing import Any

import jax
from flax import nnx
from jax.sharding import Mesh

from agentrl_jax.models.decoder import Decoder, LoraParam
from agentrl_jax.parallel import sharding as sharding_lib
from agentrl_jax.sampling.async_engine import AsyncSamplingEngine
from agentrl_jax.sampling.engine import SamplingEngine
from agentrl_jax.sampling.weights import (
    SamplerWeights,
    Weights,
    place_weights,
    split_layers,
    split_shardings,
    weight_shardings,
)
from agentrl_jax.tree_digest import tree_digest


def adapter_names(model: Decoder) -> tuple[str, ...]:
    """The per-layer names of `model`'s adapter parameters."""
    return tuple(name for name in model.layers.names
                 if isinstance(getattr(model.layers, name), LoraParam))


class AdapterSamplingEngine(AsyncSamplingEngine):
    """An `AsyncSamplingEngine` whose policies are adapters over one shared base.

    `update_params` and `receive` take adapter trees, {"layers": {name: [layers, ...]}}, the
    layout of a LoRA trainer's `TrainState.params`.
    """

    def __init__(self, engine: SamplingEngine, model: Decoder, *, mesh: Mesh | None = None,
                 rules: sharding_lib.Rules = sharding_lib.DEFAULT_RULES):
        """`engine` serves `model` (a Decoder with adapters) on `mesh`; the base is taken from
        `model` once."""
        if model.cfg.lora is None or engine.cfg.replace(dtype=model.cfg.dtype) != model.cfg:
            raise ValueError("an AdapterSamplingEngine needs the engine's own model with adapters")
        super().__init__(engine)
        self._names = adapter_names(model)
        shardings = weight_shardings(model, mesh, rules)
        self._adapter_shardings = None if shardings is None else {
            "layers": {name: shardings["layers"][name] for name in self._names}}
        self._split = jax.jit(split_layers, out_shardings=split_shardings(
            self._adapter_shardings, model.cfg.num_layers))
        self._checksums: dict[str, str] = {}  # policy -> digest of the adapter it serves
        full = engine.prepare_weights(model)
        self._base: SamplerWeights = {**full, "layers": tuple(
            {k: v for k, v in layer.items() if k not in self._names} for layer in full["layers"])}

    def _place(self, adapters: Weights) -> Weights:
        adapters = {"layers": {name: adapters["layers"][name] for name in self._names}}
        return place_weights(adapters, self._adapter_shardings)

    def _served_weights(self, placed: Weights) -> SamplerWeights:
        split = self._split(placed)["layers"]
        layers = tuple({**base, **adapter}
                       for base, adapter in zip(self._base["layers"], split, strict=True))
        return {**self._base, "layers": layers}

    async def update_params(self, params: Decoder | nnx.State | Weights, version: int,
                            policy: str = "current") -> None:
        """Serves the adapter tree `params` over the base as `policy` at `version`."""
        if isinstance(params, nnx.State):
            params = nnx.to_pure_dict(params)
        if isinstance(params, Decoder):
            params = adapter_tree(params)
        weights = self._served_weights(self._place(params))
        self._checksums.pop(policy, None)
        await self.install(policy, version, weights)

    async def install(self, policy: str, version: int, weights: SamplerWeights) -> None:
        await self._run(lambda: self.engine.install(policy, version, weights))

    async def receive(self, policy: str, version: int, adapters: Weights, checksum: str
                      ) -> tuple[int | None, str]:
        """Installs `adapters` as `policy` at `version` if their placed digest is `checksum`.

        Returns the (version, digest) of what `policy` serves afterwards: the new pair when
        installed; on a mismatch, the previous version (None if none) and the digest of the
        refused arrays, so that the sender sees the failure.
        """
        placed = self._place(adapters)
        digest = tree_digest(placed)  # read back from the devices
        if digest != checksum:
            return (await self.policies()).get(policy), digest
        await self.install(policy, version, self._served_weights(placed))
        self._checksums[policy] = digest
        served_version, _ = await self.served(policy)
        return served_version, digest

    async def served(self, policy: str) -> tuple[int | None, str | None]:
        """(version, adapter checksum) that `policy` serves now (checksum None if installed
        without verification, through `update_params`)."""
        return (await self.policies()).get(policy), self._checksums.get(policy)

    def base_bytes(self) -> int:
        """Device bytes of the one base copy every policy reads."""
        return sum(x.nbytes for x in jax.tree.leaves(self._base))


def adapter_tree(model: Decoder) -> dict[str, Any]:
    """The adapter arrays of a Decoder with adapters, {"layers": {name: [layers, ...]}}."""
    return {"layers": {name: getattr(model.layers, name)[...] for name in adapter_names(model)}}
