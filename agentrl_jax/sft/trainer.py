"""Supervised fine-tuning with the RL trainer's machinery (sharding, packing, accumulation).

The only difference from `rl.train_step.Trainer` is the loss of a micro-batch:

    L = − Σ_t m_t log π_θ(x_{t+1} | x_{≤t}) / N_global,     N_global = Σ_t m_t over the step

(m_t = 1 on the demonstration's assistant tokens, `sft.context_loss_weight` on the others),
so micro-batch losses add up to the global token mean exactly as the policy loss does.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from agentrl_jax.rl.batch import TrainBatch
from agentrl_jax.rl.train_step import Trainer


def masked_nll(logp: jax.Array, mask: jax.Array, num_tokens: jax.Array
               ) -> tuple[jax.Array, dict[str, jax.Array]]:
    """(− Σ m·logp / N, metrics) for one micro-batch; `num_tokens` is the global Σ m."""
    denom = jnp.maximum(num_tokens, 1.0)
    loss = -jnp.sum(mask * logp) / denom
    correct = jnp.sum(mask * (logp > jnp.log(0.5))) / denom  # argmax-certain tokens
    return loss, {"loss": loss, "nll": loss, "confident_token_frac": correct}


class SFTTrainer(Trainer):
    """A `Trainer` whose step minimises the masked negative log-likelihood."""

    def _micro_loss(self, params, batch: TrainBatch, num_tokens, ref_params):
        logp, _ = self._forward(self.graphdef, params, batch)
        return masked_nll(logp, jnp.asarray(batch.loss_mask), num_tokens)
