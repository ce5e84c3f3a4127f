"""Weight sync: the trainer's new parameters become the sampler's policies.

The current policy is refreshed after every step; the stale snapshot of cross-policy sampling
only every `stale_every` steps (AgentRL: 25). The arrays are copied before they are handed to
the sampler, because the next train step donates (reuses) the trainer's buffers; the engine
then reshards the copy onto the sampler mesh (`jax.device_put`), which is the transfer between
trainer and sampler sub-meshes in the disaggregated layout.

With `trainer.lora`, an update carries the adapter tree alone (the sampler keeps the base,
`sampling.adapter_engine`; a worker process loads its own, `pipeline.sampling_worker`), and
delivery to an in-process sampler is verified: each update has a version and a SHA-256
checksum of its arrays, computed on the trainer's host before sending; the sampler installs it
only if the arrays it placed have that checksum and answers with the (version, checksum) it now
serves. `deliver` retries a lost or refused update and fails loudly after `attempts`, so a
sampler can never go on serving old or corrupted weights under a new version number. Workers
behind the hub verify what they download against the same checksum and report what they serve
(`pipeline.rollout_hub`).

On a pod the trainer's gather (`pipeline.trainer_driver.ParamGather`) leaves stacked leaves as
lists of layers: `stacked` and `sampler_layout` turn that into the host layout and the engine's
per-layer layout; `PlacedWeights` is such a gather already on the in-process sampler's devices.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

import jax
import jax.numpy as jnp
import numpy as np

from agentrl_jax.pipeline.rollout_hub import RolloutHub
from agentrl_jax.rl.train_step import TrainState
from agentrl_jax.rollout.cross_policy import STALE_POLICY, TRAINED_POLICY
from agentrl_jax.sampling.async_engine import AsyncSamplingEngine
from agentrl_jax.sampling.weights import Weights, weights_of
from agentrl_jax.tree_digest import tree_digest

log = logging.getLogger(__name__)

DELIVERY_ATTEMPTS = 3


class DeliveryError(RuntimeError):
    """A weight update did not reach the sampler intact after every attempt."""


@dataclasses.dataclass(frozen=True)
class WeightUpdate:
    """One version of the weights (or, with LoRA, of the adapters) as host arrays."""

    version: int
    weights: Weights
    checksum: str

    @classmethod
    def of(cls, version: int, weights: Weights) -> WeightUpdate:
        host = jax.device_get(weights)
        return cls(version, host, tree_digest(host))

    @property
    def nbytes(self) -> int:
        return sum(x.nbytes for x in jax.tree.leaves(self.weights))


# (policy, version, weights, checksum) -> the (version, checksum) the sampler serves afterwards.
Receiver = Callable[[str, int, Weights, str], Awaitable[tuple[Any, str]]]


async def deliver(receive: Receiver, policy: str, update: WeightUpdate,
                  attempts: int = DELIVERY_ATTEMPTS) -> int:
    """Sends `update` as `policy` until the sampler confirms its version and checksum.

    Returns the number of attempts it took; raises `DeliveryError` when none confirmed.
    """
    served: tuple[Any, str] | None = None
    for attempt in range(1, attempts + 1):
        served = await receive(policy, update.version, update.weights, update.checksum)
        if tuple(served) == (update.version, update.checksum):
            return attempt
        log.warning("weight update %s v%d not confirmed (sampler serves %s), attempt %d/%d",
                    policy, update.version, served, attempt, attempts)
    raise DeliveryError(
        f"policy {policy!r} version {update.version} (checksum {update.checksum[:12]}) not "
        f"confirmed after {attempts} attempts; the sampler serves {served}")


class WeightsSource(Protocol):
    """What a weight sync reads of the trainer (a `Trainer`, or a `TrainerDriver` over one):
    its LoRA settings (None without adapters) and the model its parameters make."""

    @property
    def lora(self) -> Any: ...

    def model(self, params: Any) -> Any: ...


def snapshot(trainer: WeightsSource, state: TrainState):
    """A copy of what the sampler needs, independent of donated buffers: the sampler-layout
    weights, or with LoRA the adapter tree alone."""
    if trainer.lora is not None:
        return jax.tree.map(jnp.copy, state.params)
    return jax.tree.map(jnp.copy, weights_of(trainer.model(state.params)))


def sampler_layout(gathered: Weights) -> Any:
    """Gathered `Weights` (stacked leaves as lists of layers) in the sampler's per-layer layout
    (`sampling.weights.SamplerWeights`), which `SamplingEngine.install` takes as it is."""
    layers = gathered["layers"]
    count = len(next(iter(layers.values())))
    return {**gathered, "layers": tuple({name: pieces[i] for name, pieces in layers.items()}
                                        for i in range(count))}


def stacked(gathered: Any) -> Any:
    """`ParamGather` output on the host back in the parameters' layout (layers stacked)."""
    return jax.tree.map(lambda x: np.stack(x) if isinstance(x, list) else x, gathered,
                        is_leaf=lambda x: isinstance(x, list))


def replica_of(placed: Any, index: int) -> Any:
    """Replica `index`'s tree of an `onto_each` gather."""
    return jax.tree.map(lambda copies: copies[index], placed,
                        is_leaf=lambda x: isinstance(x, tuple))


@dataclasses.dataclass(frozen=True)
class PlacedWeights:
    """One weight version gathered straight onto the in-process sampler's devices (what a
    leader with `place` hands the pipeline): the engine installs `layout()` as it is, the hub
    publishes `checksum` and makes `host()` only if an out-of-process worker downloads it."""

    tree: Any  # `ParamGather` output placed by `onto` (stacked leaves as lists of layers)
    checksum: str  # `tree_digest.layered_digest(tree)`: the published `tree_digest` of `host()`

    def layout(self) -> Any:
        return sampler_layout(self.tree)

    def host(self) -> Weights:
        return stacked(jax.device_get(self.tree))


def weights_nbytes(weights: Any) -> int:
    """Bytes of one weight update as a driver's `weights` returns it."""
    tree = weights.tree if isinstance(weights, PlacedWeights) else weights
    return sum(x.nbytes for x in jax.tree.leaves(tree))


async def sync_weights(
    engine: AsyncSamplingEngine | None,
    trainer: WeightsSource,
    state: TrainState,
    version: int,
    *,
    stale_every: int | None,
    hub: RolloutHub | None = None,
    weights: Weights | None = None,
) -> list[str]:
    """Pushes `state`'s parameters as version `version` to the in-process engine and to the
    hub of out-of-process samplers; returns the policies updated.

    `weights`: the sampler-layout weights of `state` when the caller has them already (a
    multi-host leader gathers them to its host, or as `PlacedWeights` straight onto the
    sampler's devices, which the engine installs as they are); default a device copy.
    An engine with a `receive` method (`AdapterSamplingEngine`) gets verified delivery.
    """
    if hub is not None and hub.serves_adapters != (trainer.lora is not None):
        raise ValueError(
            "the rollout hub's spec and the trainer disagree on LoRA: a LoRA trainer's hub needs "
            "make_spec(..., adapters=adapter_spec(trainer, base_model)), and only a LoRA "
            "trainer's hub may have one")
    weights = snapshot(trainer, state) if weights is None else weights
    updated = [TRAINED_POLICY]
    if stale_every and version % stale_every == 0:
        updated.append(STALE_POLICY)
    if isinstance(weights, PlacedWeights):  # on the sampler's devices already, digested there
        for policy in updated:
            if engine is not None:
                await engine.install(policy, version, weights.layout())
            if hub is not None:
                hub.publish(policy, version, weights.host, checksum=weights.checksum)
        return updated
    receive = getattr(engine, "receive", None)  # an adapter engine verifies what it installs
    update = (WeightUpdate.of(version, weights) if receive is not None or hub is not None
              else None)
    for policy in updated:
        if receive is not None and update is not None:
            await deliver(receive, policy, update)
        elif engine is not None:
            await engine.update_params(weights, version, policy=policy)
        if hub is not None and update is not None:
            hub.publish(policy, version, update.weights, checksum=update.checksum)
    return updated
