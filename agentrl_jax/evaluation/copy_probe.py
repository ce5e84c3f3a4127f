"""The copy probe: does a policy copy from its context by content, not by position?

An agent's calls name what it has read (an object in the room, a table's column, a product):
the policy must find the name in its context and copy it. Induction heads do this in pretrained
models; a model trained from scratch on a few hundred demonstrations may not have them
(docs/warm_start.md). The probe measures the mechanism directly, on held-out synthetic
sequences of uniformly random tokens, where nothing but copying helps:

    x = r_1 … r_a  s_1 … s_L  r … r  s_1 … s_L  r … r      (r: fresh random tokens)
                   ^ first occurrence at a       ^ repeat at b, b − a random

    copy NLL = mean over the repeat's tokens but its first, −log p(s_j | x_<(b + j))

A model that copies perfectly scores ~0; a uniform one ln V. The offset b − a is drawn anew per
sequence from a range wider than the span, so a shortcut that attends a fixed distance back
(what a probe with one offset rewards) is right on few sequences and scores near ln V too.
"""

from __future__ import annotations

import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np

from agentrl_jax import stage_clock
from agentrl_jax.models.decoder import Decoder
from agentrl_jax.models.logprobs import token_logprobs

PROBE_SEED = 20_231_207   # fixed, and no training data is ever drawn from it: held out


@dataclasses.dataclass(frozen=True)
class ProbeBatch:
    """tokens int32 [N, T]; target_mask float32 [N, T]: 1 where token t is scored (predicted
    from tokens < t); offsets int [N]: each sequence's b − a."""

    tokens: np.ndarray
    target_mask: np.ndarray
    offsets: np.ndarray


def probe_batch(vocab: tuple[int, int], num_sequences: int = 16, length: int = 192,
                span: int = 24, seed: int = PROBE_SEED) -> ProbeBatch:
    """Random-token sequences with one span repeated at a random offset (see the module).

    `vocab = (low, high)`: tokens are drawn uniformly from [low, high), so the probe can skip a
    tokenizer's special tokens. The offset is uniform in [span, length − span − 1], at least
    the span (the repeat starts after the first occurrence ends) and wider than it.
    """
    low, high = vocab
    if not 0 <= low < high - 2 * span or length < 4 * span or span < 2:
        raise ValueError(f"need 0 <= low < high - 2 * span, span >= 2 and length >= 4 * span;"
                         f" got vocab {vocab}, span {span}, length {length}")
    rng = np.random.default_rng(seed)
    tokens = np.zeros((num_sequences, length), np.int64)
    mask = np.zeros((num_sequences, length), np.float32)
    offsets = np.zeros(num_sequences, np.int64)
    for i in range(num_sequences):
        # The span's tokens are distinct and occur nowhere else in the sequence, so each
        # repeated token has one right continuation to copy.
        spanned = rng.choice(np.arange(low, high), size=span, replace=False)
        row = rng.integers(low, high, size=length)
        while (clash := np.isin(row, spanned)).any():
            row[clash] = rng.integers(low, high, size=int(clash.sum()))
        offset = int(rng.integers(span, length - span))
        first = int(rng.integers(0, length - span - offset + 1))
        repeat = first + offset
        row[first:first + span] = row[repeat:repeat + span] = spanned
        tokens[i] = row
        mask[i, repeat + 1:repeat + span] = 1.0
        offsets[i] = offset
    return ProbeBatch(tokens.astype(np.int32), mask, offsets)


def copy_nll(log_probs: np.ndarray, batch: ProbeBatch) -> float:
    """The mean −log p over the scored tokens, from `log_probs[n, t]` = log p(token t | < t)."""
    mask = batch.target_mask
    return float(-(np.asarray(log_probs, np.float64) * mask).sum() / mask.sum())


def decoder_log_probs(model: Decoder, tokens: np.ndarray) -> np.ndarray:
    """log p(tokens[:, t] | tokens[:, <t]) [N, T] under `model` (0 at t = 0, never scored)."""
    ids = jnp.asarray(tokens)
    n, t = ids.shape
    positions = jnp.broadcast_to(jnp.arange(t, dtype=jnp.int32), (n, t))
    segments = jnp.ones((n, t), jnp.int32)
    targets = jnp.concatenate([ids[:, 1:], ids[:, :1]], axis=1)
    logp, _ = token_logprobs(model, ids, positions, segments, targets,
                             entropy_grad=False)
    shifted = jnp.concatenate([jnp.zeros((n, 1), logp.dtype), logp[:, :-1]], axis=1)
    return np.asarray(jax.device_get(shifted))


def probe_vocab(vocab_size: int, special_ids: set[int] | frozenset[int] = frozenset()
                ) -> tuple[int, int]:
    """The [low, high) range the probe draws from: above the last special token at the start
    of the vocabulary (scratch and pruned tokenizers put them first)."""
    low = 0
    while low in special_ids:
        low += 1
    return low, vocab_size


def run_probe(model: Decoder, vocab: tuple[int, int], **batch_args) -> dict[str, float]:
    """The probe's figures for `model`: `copy_probe_nll`, and `copy_probe_ln_v` (chance)."""
    with stage_clock.span("eval_bookkeeping"):
        batch = probe_batch(vocab, **batch_args)
        return {"copy_probe_nll": round(copy_nll(decoder_log_probs(model, batch.tokens), batch),
                                        4),
                "copy_probe_ln_v": round(math.log(model.cfg.vocab_size), 4)}

