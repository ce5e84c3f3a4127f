"""Token-level policy losses: PPO-clip, decoupled PPO, truncated IS, KL, entropy.

All functions are pure, take per-token arrays [..., T] and are jit/grad friendly. Notation, per
token t with advantage A_t and loss weight m_t (the loss mask, possibly times a trajectory
weight):

  log π_θ       current policy (differentiable), logits / temperature as at sampling time
  log π_behav   the policy that sampled the token (stored by the sampler)
  log π_prox    optional proximal policy (decoupled PPO, AReaL): the trainer's recomputation of
                the log-probs under the weights of the last step
  log π_ref     optional frozen reference, for the KL term

Aggregation is the token mean over the GLOBAL batch: each micro-batch returns
sum_t m_t l_t / N_global, with N_global = sum of m over all micro-batches of the step, so summing
micro-batch losses (and their gradients) gives exactly the global token mean, whatever the split.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import ml_collections


def default_config() -> ml_collections.ConfigDict:
    """Loss settings; defaults are AgentRL's released configs (reference notes 1.4)."""
    return ml_collections.ConfigDict(
        dict(
            clip_eps_low=0.2,
            clip_eps_high=0.2,
            dual_clip_c=3.0,  # <= 1 or None disables dual-clip
            decoupled=False,  # use proximal log-probs when the batch carries them
            tis_cap=None,  # truncate the behaviour importance weight at this value
            kl_coef=0.0,
            kl_estimator="k3",  # k1 | k2 | k3
            entropy_coef=0.0,
        )
    )


def ppo_clip_loss(
    ratio: jax.Array,
    advantages: jax.Array,
    clip_eps_low: float = 0.2,
    clip_eps_high: float = 0.2,
    dual_clip_c: float | None = 3.0,
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """Per-token PPO-clip loss with dual-clip (Ye et al., 2020) for negative advantages.

    l1 = -A r,   l2 = -A clip(r, 1 - eps_low, 1 + eps_high),   l = max(l1, l2)
    if A < 0 and c > 1:  l = min(l, -c A)     (bounds the loss when r >> 1 on a bad token)

    Returns:
      (loss [...], clipped [...] bool: l2 > l1, dual_clipped [...] bool).
    """
    l1 = -advantages * ratio
    l2 = -advantages * jnp.clip(ratio, 1.0 - clip_eps_low, 1.0 + clip_eps_high)
    loss = jnp.maximum(l1, l2)
    clipped = l2 > l1
    if dual_clip_c is None or dual_clip_c <= 1.0:
        return loss, clipped, jnp.zeros_like(clipped)
    l3 = -advantages * dual_clip_c
    dual = (advantages < 0) & (l3 < loss)
    return jnp.where(dual, l3, loss), clipped, dual


def kl_penalty(logp: jax.Array, ref_logp: jax.Array, estimator: str = "k3") -> jax.Array:
    """Per-token estimators of KL(π_θ || π_ref) from samples of π_θ (Schulman, 2020).

    d = log π_ref - log π_θ
    k1 = -d             unbiased, high variance, can be negative
    k2 = d² / 2          biased, low variance
    k3 = exp(d) - d - 1  unbiased, low variance, >= 0 ("low_var_kl"); d clamped to [-20, 20]
                         and the result to [-10, 10] as in verl, so one outlier token cannot
                         produce an inf.
    """
    d = ref_logp - logp
    if estimator == "k1":
        return -d
    if estimator == "k2":
        return 0.5 * d**2
    if estimator == "k3":
        d = jnp.clip(d, -20.0, 20.0)
        return jnp.clip(jnp.exp(d) - d - 1.0, -10.0, 10.0)
    raise ValueError(f"unknown KL estimator {estimator!r}")


def policy_loss(
    logp: jax.Array,
    behav_logp: jax.Array,
    advantages: jax.Array,
    loss_mask: jax.Array,
    num_global_tokens: jax.Array | float,
    config: ml_collections.ConfigDict,
    prox_logp: jax.Array | None = None,
    ref_logp: jax.Array | None = None,
    entropy: jax.Array | None = None,
) -> tuple[jax.Array, dict[str, jax.Array]]:
    """The total loss of one micro-batch, normalised by the global loss-token count.

    anchor = π_prox if (config.decoupled and prox given) else π_behav
    r   = π_θ / π_anchor                              (the clipped ratio)
    w   = sg(π_anchor / π_behav), then min(w, tis_cap) if tis_cap is set
          (w = 1 without a proximal policy, where PPO's own clip already bounds r)
    l_t = w_t · ppo_clip(r_t, A_t) + β_kl · k(π_θ, π_ref)_t - β_ent · H_t
    L   = sum_t m_t l_t / N_global

    Returns:
      (L, metrics). Metrics named `*_max` / `*_min` are extrema over this micro-batch; every other
      metric is, like L, a sum over tokens divided by N_global, so summing it over micro-batches
      gives the global token mean.
    """
    mask = loss_mask.astype(jnp.float32)
    denom = jnp.maximum(jnp.asarray(num_global_tokens, jnp.float32), 1.0)

    def tmean(x):  # contribution of this micro-batch to the global token mean
        return jnp.sum(x * mask) / denom

    prox = prox_logp if config.decoupled else None
    anchor = jax.lax.stop_gradient(behav_logp if prox is None else prox)
    log_ratio = logp - anchor
    ratio = jnp.exp(log_ratio)
    if prox is not None:
        is_weight = jnp.exp(anchor - behav_logp)
    else:
        is_weight = jnp.ones_like(ratio)
    if config.tis_cap is not None:
        is_weight = jnp.minimum(is_weight, config.tis_cap)
    is_weight = jax.lax.stop_gradient(is_weight)

    pg, clipped, dual = ppo_clip_loss(
        ratio, advantages, config.clip_eps_low, config.clip_eps_high, config.dual_clip_c
    )
    pg_loss = tmean(is_weight * pg)
    loss = pg_loss

    masked_ratio_hi = jnp.where(mask > 0, ratio, -jnp.inf)
    masked_ratio_lo = jnp.where(mask > 0, ratio, jnp.inf)
    metrics = {
        "pg_loss": pg_loss,
        "clip_frac": tmean(clipped.astype(jnp.float32)),
        "dual_clip_frac": tmean(dual.astype(jnp.float32)),
        "ratio_mean": tmean(ratio),
        "ratio_max": jnp.max(masked_ratio_hi),
        "ratio_min": jnp.min(masked_ratio_lo),
        # k3 estimate of KL(π_behav || π_θ) drift, on the tokens sampled from π_behav.
        "behav_kl": tmean(kl_penalty(behav_logp, jax.lax.stop_gradient(logp), "k3")),
        "is_weight_mean": tmean(is_weight),
        "num_tokens": jnp.sum(mask),
    }
    if config.kl_coef and ref_logp is not None:
        kl = tmean(kl_penalty(logp, ref_logp, config.kl_estimator))
        loss = loss + config.kl_coef * kl
        metrics["kl"] = kl
    if entropy is not None:
        ent = tmean(entropy)
        metrics["entropy"] = ent
        if config.entropy_coef:
            loss = loss - config.entropy_coef * ent
    metrics["loss"] = loss
    return loss, metrics


def reduce_metrics(per_micro: dict[str, jax.Array]) -> dict[str, jax.Array]:
    """Combines stacked per-micro-batch metrics [M] into step metrics (sum, or max/min)."""
    out = {}
    for k, v in per_micro.items():
        if k.endswith("_max"):
            out[k] = jnp.max(v)
        elif k.endswith("_min"):
            out[k] = jnp.min(v)
        else:
            out[k] = jnp.sum(v)
    return out
