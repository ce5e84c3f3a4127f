"""Mimetic initialisation of attention (Trockman & Kolter, 2023), a prior for copying.

Trained attention layers show structure from the start of training that random weights lack:
per head, the query-key product is close to a multiple of the identity (a token attends to
tokens like itself, the first half of an induction head) and the value-output product close to
minus the identity. Mimetic initialisation starts a model there:

    W_Q^h (W_K^g)^T ≈ α₁ Z₁ + β₁ I        W_V^g W_O^h ≈ α₂ Z₂ − β₂ I,     Z ~ N(0, 1/d)

for each query head h of key-value group g. Each product is d × d of rank head_dim, so it is
the best rank-head_dim approximation: with M = U S Vᵀ, W_Q^h = U_k S_k^½, W_K^g = V_k S_k^½ (and
alike for V and O). Query heads of one group share their keys and values (grouped-query
attention), so the group's factors are drawn once and each query head takes the same ones.

Scale. Our blocks normalise their input (RMSNorm, |x|² ≈ d), so an identity product gives
attention logits of β₁ d / √head_dim: `qk_logit` sets that size directly (β₁ = qk_logit ·
√head_dim / d) rather than the paper's β₁ for unnormalised inputs. Whether it helps copying form
at our budget is measured in benchmarks/probes/copy_prior.py.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from agentrl_jax.models.decoder import Decoder


def low_rank_factors(m: np.ndarray, rank: int) -> tuple[np.ndarray, np.ndarray]:
    """A [d, rank], B [rank, d] with A @ B the best rank-`rank` approximation of `m`."""
    u, s, vt = np.linalg.svd(m)
    root = np.sqrt(s[:rank])
    return u[:, :rank] * root, root[:, None] * vt[:rank]


def mimetic_attention(model: Decoder, seed: int = 0, qk_logit: float = 4.0,
                      alpha: float = 0.2, vo_scale: float = 0.5) -> Decoder:
    """Sets `model`'s q/k/v/o projections (in place) to mimetic values; returns `model`.

    `qk_logit`: the attention logit an identity product gives a token against itself (see the
    module). `alpha`: the noise's weight against the identity (α/β, both products). `vo_scale`:
    β₂, the size of −I in W_V W_O relative to the residual stream.
    """
    cfg = model.cfg
    d, hd = cfg.hidden_size, cfg.head_dim
    group = cfg.num_heads // cfg.num_kv_heads
    rng = np.random.default_rng(seed)
    beta_qk = qk_logit * np.sqrt(hd) / d
    layers = model.layers
    q, k, v, o = (np.array(getattr(layers, n)[...], np.float64)
                  for n in ("q_proj", "k_proj", "v_proj", "o_proj"))
    eye = np.eye(d)
    for layer in range(cfg.num_layers):
        for g in range(cfg.num_kv_heads):
            z1, z2 = (rng.normal(0, 1 / np.sqrt(d), (d, d)) for _ in range(2))
            wq, wk_t = low_rank_factors(beta_qk * (alpha * z1 + eye), hd)
            wv, wo = low_rank_factors(vo_scale * (alpha * z2 - eye), hd)
            k[layer, :, g * hd:(g + 1) * hd] = wk_t.T
            v[layer, :, g * hd:(g + 1) * hd] = wv
            for h in range(g * group, (g + 1) * group):
                q[layer, :, h * hd:(h + 1) * hd] = wq
                o[layer, h * hd:(h + 1) * hd, :] = wo / group
    for name, value in (("q_proj", q), ("k_proj", k), ("v_proj", v), ("o_proj", o)):
        param: nnx.Param = getattr(layers, name)
        param[...] = jnp.asarray(value, param[...].dtype)
    return model


def head_products(model: Decoder, layer: int, head: int) -> tuple[jax.Array, jax.Array]:
    """(W_Q^h W_K^gᵀ, W_V^g W_O^h), both [d, d], of query head `head` in `layer`."""
    cfg = model.cfg
    hd, g = cfg.head_dim, head // (cfg.num_heads // cfg.num_kv_heads)
    p = model.layers.stacked()
    q = p["q_proj"][layer, :, head * hd:(head + 1) * hd]
    k = p["k_proj"][layer, :, g * hd:(g + 1) * hd]
    v = p["v_proj"][layer, :, g * hd:(g + 1) * hd]
    o = p["o_proj"][layer, head * hd:(head + 1) * hd, :]
    return q @ k.T, v @ o
