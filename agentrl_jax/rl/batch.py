"""The trainer's batch format, and packing of variable-length trajectories into it.

A trajectory is the token stream of one episode, x_0 .. x_{n-1}, with per token: whether the
policy sampled it (loss mask), its behaviour log-prob, and optionally proximal / reference
log-probs; plus one advantage and weight for the whole trajectory. Training predicts x_{t+1}
from x_{<=t}, so a packed row holds inputs x_0..x_{n-2}, targets x_1..x_{n-1}, and the per-token
fields of the targets.

Shapes must come from a small set, or every new length recompiles the step. Rows have a length
from `seq_buckets` (the smallest that fits the longest trajectory); a micro-batch holds
`tokens_per_micro // T` rows (a constant token budget, as AgentRL's 16k tokens per micro-batch)
rounded to the data-parallel size. Trajectories are packed first-fit-decreasing, several per
row, separated by segment ids. The number of micro-batches varies freely: the step loops over
them (see `train_step.py`).

The last micro-batch holds only as many rows as it needs, rounded up to a power of two (times
the data-parallel size), since an empty row costs as much as a full one: a warm-start step of
one demonstration otherwise computes a whole micro-batch of rows for it
(`benchmarks/warm_start_step.py`). Each bucket has at most 1 + log2(rows) row counts, each
compiled once.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import jax
import numpy as np


@jax.tree_util.register_dataclass
@dataclasses.dataclass
class TrainBatch:
    """One micro-batch, all [B, T]. Optional log-probs may be None (absent from the pytree)."""

    tokens: np.ndarray | jax.Array  # int32 inputs
    positions: np.ndarray | jax.Array  # int32, restart at 0 in each segment
    segment_ids: np.ndarray | jax.Array  # int32, 0 = padding
    targets: np.ndarray | jax.Array  # int32, the next token
    loss_mask: np.ndarray | jax.Array  # float32, 1 on policy tokens (times trajectory weight)
    advantages: np.ndarray | jax.Array  # float32 per token
    behaviour_logprobs: np.ndarray | jax.Array  # float32
    proximal_logprobs: np.ndarray | jax.Array | None = None
    reference_logprobs: np.ndarray | jax.Array | None = None
    # int32 [B, K]: the positions the loss reads (`loss_positions`); None: every position
    loss_at: np.ndarray | jax.Array | None = None

    @property
    def shape(self) -> tuple[int, int]:
        return tuple(self.tokens.shape)

    @classmethod
    def zeros(cls, rows: int, length: int, *, proximal: bool = False,
              reference: bool = False) -> TrainBatch:
        """An all-padding [rows, length] micro-batch (what `pack` fills), with the optional
        log-probabilities where asked."""
        shape = (rows, length)
        ints = {k: np.zeros(shape, np.int32)
                for k in ("tokens", "positions", "segment_ids", "targets")}
        floats = {k: np.zeros(shape, np.float32)
                  for k in ("loss_mask", "advantages", "behaviour_logprobs")}
        return cls(**ints, **floats,
                   proximal_logprobs=np.zeros(shape, np.float32) if proximal else None,
                   reference_logprobs=np.zeros(shape, np.float32) if reference else None)


@dataclasses.dataclass
class Trajectory:
    """One episode's token stream, per-token fields aligned with `tokens` (length n)."""

    tokens: Sequence[int] | np.ndarray
    loss_mask: Sequence[float] | np.ndarray  # 1 where tokens[i] was sampled by the policy
    behaviour_logprobs: Sequence[float] | np.ndarray  # log π_behav(tokens[i]); any if mask is 0
    advantage: float
    weight: float = 1.0
    proximal_logprobs: Sequence[float] | np.ndarray | None = None
    reference_logprobs: Sequence[float] | np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.tokens)


def pick_bucket(length: int, buckets: Sequence[int]) -> int:
    """The smallest bucket >= length."""
    for b in sorted(buckets):
        if b >= length:
            return b
    raise ValueError(f"sequence of {length} tokens exceeds the largest bucket {max(buckets)}")


def _first_fit_decreasing(lengths: Sequence[int], capacity: int) -> list[list[int]]:
    """Bins of trajectory indices whose lengths sum to <= capacity (first-fit decreasing)."""
    rows: list[list[int]] = []
    free: list[int] = []
    for i in sorted(range(len(lengths)), key=lambda j: -lengths[j]):
        for r, f in enumerate(free):
            if lengths[i] <= f:
                rows[r].append(i)
                free[r] -= lengths[i]
                break
        else:
            rows.append([i])
            free.append(capacity - lengths[i])
    return rows


def micro_rows(seq_len: int, tokens_per_micro: int, row_multiple: int = 1) -> int:
    """Rows of one micro-batch: max(budget // T, row_multiple), a multiple of row_multiple."""
    rows = max(tokens_per_micro // seq_len, row_multiple)
    return rows - rows % row_multiple


def micro_batch_rows(num_rows: int, rows_per_micro: int, row_multiple: int = 1) -> list[int]:
    """Rows of each micro-batch holding `num_rows` packed rows: full micro-batches, then the
    rest in the smallest row_multiple · 2^k rows that hold it (at most rows_per_micro)."""
    sizes = [rows_per_micro] * (num_rows // rows_per_micro)
    rest = num_rows - sum(sizes)
    if rest:
        tail = row_multiple
        while tail < rest:
            tail *= 2
        sizes.append(min(tail, rows_per_micro))
    return sizes


def loss_positions(loss_mask: np.ndarray, min_width: int = 128) -> np.ndarray | None:
    """Each row's positions with a nonzero loss weight, int32 [B, K], padded with T.

    K is T / 2^j, the smallest such width (at least `min_width`) that holds every row's count:
    at most 1 + log2(T / min_width) widths per row length, each compiled once. None when K
    would be T: the loss reads (nearly) every position, and a gather would only add work.
    """
    rows, length = loss_mask.shape
    need = max(int(np.count_nonzero(loss_mask, axis=1).max(initial=0)), 1, min_width)
    width = length
    while width % 2 == 0 and width // 2 >= need:
        width //= 2
    if width == length:
        return None
    at = np.full((rows, width), length, np.int32)
    for r in range(rows):
        hits = np.flatnonzero(loss_mask[r])
        at[r, :len(hits)] = hits
    return at


def pack_rows(lengths: Sequence[int], seq_len: int, tokens_per_micro: int,
              row_multiple: int = 1) -> int:
    """Rows `pack` makes for trajectories of `lengths` inputs at row length `seq_len`."""
    per_micro = micro_rows(seq_len, tokens_per_micro, row_multiple)
    return sum(micro_batch_rows(len(_first_fit_decreasing(lengths, seq_len)), per_micro,
                                row_multiple))


def pack(
    trajectories: Sequence[Trajectory],
    seq_buckets: Sequence[int],
    tokens_per_micro: int,
    row_multiple: int = 1,
) -> tuple[list[TrainBatch], float]:
    """Packs trajectories into micro-batches of shape [tokens_per_micro // T, T], the last one
    cut to the rows it needs (`micro_batch_rows`).

    Args:
      seq_buckets: allowed row lengths T.
      tokens_per_micro: token budget of one micro-batch; rows = max(budget // T, row_multiple),
        rounded down to a multiple of `row_multiple` (the data-parallel size).
    Returns:
      (micro-batches as numpy TrainBatches, global number of loss tokens Σ loss_mask).
    """
    if not trajectories:
        raise ValueError("nothing to pack")
    lengths = [len(t) - 1 for t in trajectories]  # inputs per trajectory after the shift
    if min(lengths) < 1:
        raise ValueError("a trajectory needs at least 2 tokens (one input, one target)")
    seq_len = pick_bucket(max(lengths), seq_buckets)
    rows_per_micro = micro_rows(seq_len, tokens_per_micro, row_multiple)
    bins = _first_fit_decreasing(lengths, seq_len)
    sizes = micro_batch_rows(len(bins), rows_per_micro, row_multiple)
    num_rows = sum(sizes)

    has_prox = all(t.proximal_logprobs is not None for t in trajectories)
    has_ref = all(t.reference_logprobs is not None for t in trajectories)
    empty = TrainBatch.zeros(num_rows, seq_len, proximal=has_prox, reference=has_ref)
    f = {field.name: getattr(empty, field.name) for field in dataclasses.fields(empty)
         if getattr(empty, field.name) is not None}

    for r, members in enumerate(bins):
        start = 0
        for seg, i in enumerate(members, start=1):
            t = trajectories[i]
            n = lengths[i]
            s = slice(start, start + n)
            tok = np.asarray(t.tokens, np.int32)
            f["tokens"][r, s] = tok[:-1]
            f["targets"][r, s] = tok[1:]
            f["positions"][r, s] = np.arange(n)
            f["segment_ids"][r, s] = seg
            f["loss_mask"][r, s] = np.asarray(t.loss_mask, np.float32)[1:] * t.weight
            f["advantages"][r, s] = t.advantage
            f["behaviour_logprobs"][r, s] = np.asarray(t.behaviour_logprobs, np.float32)[1:]
            if has_prox:
                f["proximal_logprobs"][r, s] = np.asarray(t.proximal_logprobs, np.float32)[1:]
            if has_ref:
                f["reference_logprobs"][r, s] = np.asarray(t.reference_logprobs, np.float32)[1:]
            start += n

    starts = np.cumsum([0, *sizes])
    micro = [TrainBatch(**{k: v[lo:hi] for k, v in f.items()})
             for lo, hi in zip(starts[:-1], starts[1:], strict=True)]
    return micro, float(f["loss_mask"].sum())
