"""The warm start's plan: which demonstrations each step trains on, and at which row lengths.

`plan_steps` groups the demonstrations of each length bucket into steps. Every distinct row
length compiles the train step once more (about 20 s on a 2-core CPU for the scratch model),
and every padded token is computed. Hand-picked buckets fit the tasks their author measured; a
user's own tasks have other lengths. `choose_buckets` picks `count` row
lengths (multiples of `multiple`) that minimise the modelled compute of the warm start's actual
plan: the steps `plan_steps` makes, each packed as `rl.batch.pack` packs it.

Cost model (forward FLOPs; backward is a constant multiple): a micro-batch of R rows of T tokens
costs R·T·(2N + 2·L·H·T) for a model of N parameters per token, L layers and H = heads ×
head_dim, since the block-causal attention scores about T/2 keys per query. Divided by 2N:

    cost(R, T) = R · T · (1 + w·T),   w = L·H / N   (`attention_weight`)
"""

from __future__ import annotations

import bisect
import random
from collections.abc import Sequence

from agentrl_jax.models.config import ModelConfig
from agentrl_jax.rl.batch import pack_rows, pick_bucket


def plan_steps(lengths: Sequence[int], buckets: Sequence[int], tokens_per_step: int,
               epochs: int, seed: int) -> list[list[int]]:
    """Trajectory indices of every step: same-bucket groups of about `tokens_per_step` tokens."""
    rng = random.Random(seed)
    steps: list[list[int]] = []
    for _ in range(epochs):
        by_bucket: dict[int, list[int]] = {}
        order = list(range(len(lengths)))
        rng.shuffle(order)
        for i in order:
            by_bucket.setdefault(pick_bucket(lengths[i] - 1, buckets), []).append(i)
        epoch: list[list[int]] = []
        for members in by_bucket.values():
            current, size = [], 0
            for i in members:
                current.append(i)
                size += lengths[i]
                if size >= tokens_per_step:
                    epoch.append(current)
                    current, size = [], 0
            if current:
                epoch.append(current)
        rng.shuffle(epoch)
        steps += epoch
    return steps


def attention_weight(cfg: ModelConfig) -> float:
    """w of the cost model: attention's FLOPs per token per row position, relative to 2N."""
    return cfg.num_layers * cfg.q_dim / cfg.num_params()


def step_shapes(lengths: Sequence[int], buckets: Sequence[int],
                steps: Sequence[Sequence[int]], tokens_per_micro: int,
                row_multiple: int = 1) -> list[tuple[int, int]]:
    """(rows R, row length T) of each of `steps` (trajectory indices), as `rl.batch.pack` packs."""
    shapes = []
    for members in steps:
        inputs = [lengths[i] - 1 for i in members]
        seq_len = pick_bucket(max(inputs), buckets)
        shapes.append((pack_rows(inputs, seq_len, tokens_per_micro, row_multiple), seq_len))
    return shapes


def plan_cost(lengths: Sequence[int], buckets: Sequence[int], steps: Sequence[Sequence[int]],
              tokens_per_micro: int, row_multiple: int, weight: float) -> float:
    """Σ over `steps` of cost(R, T), with each step's shape from `step_shapes`."""
    return sum(rows * seq_len * (1.0 + weight * seq_len) for rows, seq_len in
               step_shapes(lengths, buckets, steps, tokens_per_micro, row_multiple))


def choose_buckets(lengths: Sequence[int], count: int, *, tokens_per_step: int,
                   tokens_per_micro: int, weight: float, seed: int, multiple: int = 128,
                   row_multiple: int = 1) -> tuple[int, ...]:
    """At most `count` row lengths, multiples of `multiple`, the largest holding every length.

    Coordinate descent from evenly spaced quantiles: each bucket in turn moves to the candidate
    between its neighbours that lowers `plan_cost` of one epoch's plan (seeded as the stage's),
    until no move helps. Candidates are the lengths rounded up to `multiple`, so a bucket sits
    just above a cluster of lengths. Deterministic for given inputs.
    """
    if count < 1 or not lengths:
        raise ValueError(f"need lengths and count >= 1, got {len(lengths)} lengths, {count}")
    candidates = sorted({-(-(n - 1) // multiple) * multiple for n in lengths})
    top = candidates[-1]
    ordered = sorted(n - 1 for n in lengths)
    quantiles = (ordered[len(ordered) * k // count] for k in range(1, count))
    chosen = sorted({candidates[bisect.bisect_left(candidates, q)] for q in quantiles} | {top})

    def cost(buckets: Sequence[int]) -> float:
        steps = plan_steps(lengths, buckets, tokens_per_step, 1, seed)
        return plan_cost(lengths, buckets, steps, tokens_per_micro, row_multiple, weight)

    best = cost(chosen)
    improved = True
    while improved:
        improved = False
        for k in range(len(chosen) - 1):   # the top bucket stays: it must hold the longest
            lo = chosen[k - 1] if k else 0
            for c in (c for c in candidates if lo < c < chosen[k + 1] and c != chosen[k]):
                trial = [*chosen[:k], c, *chosen[k + 1:]]
                trial_cost = cost(trial)
                if trial_cost < best:
                    chosen, best, improved = trial, trial_cost, True
    return tuple(chosen)
