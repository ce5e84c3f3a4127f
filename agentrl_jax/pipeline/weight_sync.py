"""Weight sync: the trainer's new parameters become the sampler's policies.

The current policy is refreshed after every step; the stale snapshot of cross-policy sampling
only every `stale_every` steps (AgentRL: 25). The arrays are copied before they are handed to
the sampler, because the next train step donates (reuses) the trainer's buffers; the engine
then reshards the copy onto the sampler mesh (`jax.device_put`), which is the transfer between
trainer and sampler sub-meshes in the disaggregated layout.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from agentrl_jax.pipeline.rollout_hub import RolloutHub
from agentrl_jax.rl.train_step import Trainer, TrainState
from agentrl_jax.sampling.async_engine import AsyncSamplingEngine
from agentrl_jax.sampling.weights import Weights, weights_of


def snapshot(trainer: Trainer, state: TrainState):
    """A copy of the parameters in the sampler's layout, independent of donated buffers."""
    return jax.tree.map(jnp.copy, weights_of(trainer.model(state.params)))


async def sync_weights(
    engine: AsyncSamplingEngine | None,
    trainer: Trainer,
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
    multi-host leader gathers them to its host, `pipeline.multihost`); default a device copy.
    """
    weights = snapshot(trainer, state) if weights is None else weights
    updated = ["current"]
    if stale_every and version % stale_every == 0:
        updated.append("stale")
    host_weights = jax.device_get(weights) if hub is not None else None
    for policy in updated:
        if engine is not None:
            await engine.update_params(weights, version, policy=policy)
        if hub is not None:
            hub.publish(policy, version, host_weights)
    return updated
