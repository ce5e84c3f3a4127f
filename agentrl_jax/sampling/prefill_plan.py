"""How the engine cuts prompts into prefill calls: chunk lengths, and rows per call.

A prefill call computes every position of its shape, rows × length bucket, padding included.
Padding a turn's new tokens up to the smallest length bucket that holds them wastes most of a
call when the buckets are 4x apart: a 150-token observation is computed as 512 positions. In
SmolLM2's multi-turn AgentBench transcripts half of the continuations are over 128 tokens, and
padding them up computed 2.4 positions per token (docs/performance.md).

`PrefillPlanner` minimises one cost, in positions: the positions each call computes plus
`call_tokens`, a call's fixed cost (dispatch, the weights and the context read once) expressed
in positions. `call_tokens = 0` avoids all padding it can; a large one makes as few calls as
possible (each turn in chunks of the largest bucket, the last padded up, as many rows per call
as there are).
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Sequence


def bucket_of(buckets: Sequence[int], n: int) -> int:
    """The smallest of the sorted `buckets` that holds n, or the largest."""
    return buckets[min(bisect.bisect_left(buckets, n), len(buckets) - 1)]


class PrefillPlanner:
    """Chunk lengths for a prompt, and row buckets for the calls of one length bucket.

    Both are exact minimisations by dynamic programming over small integers, memoised.
    """

    def __init__(self, lengths: Sequence[int], rows: Sequence[int], call_tokens: int,
                 call_fits: Callable[[int, int], bool] = lambda rows, length: True):
        """Args:
          lengths: the length buckets, sorted; rows: the row buckets, sorted.
          call_tokens: a call's fixed cost in positions (>= 0).
          call_fits: whether a call of (rows, length) buckets may run
            (`EngineConfig.prefill_call_fits`: its cap on positions a call computes).
        """
        if call_tokens < 0:
            raise ValueError(f"call_tokens must be >= 0, got {call_tokens}")
        self.lengths, self.rows = tuple(lengths), tuple(rows)
        self.call_tokens, self.call_fits = call_tokens, call_fits
        # remainder r -> (cost, calls, -bucket of the chunk taken first); r <= 0 is free
        self._chunks: list[tuple[int, int, int]] = [(0, 0, 0)]
        self._rows: dict[int, list[tuple[int, int, int]]] = {}

    def chunk_lengths(self, n: int) -> tuple[int, ...]:
        """Lengths, summing to n and longest first, of the cheapest way to prefill n tokens.

        cost(plan) = Σ_chunks (bucket_of(l) + call_tokens); best(r) = min over buckets b of
        b + call_tokens + best(r - b), with best(r <= 0) = 0 (the last chunk takes what is
        left, padded up to b). Ties go to fewer calls, then to full chunks of larger buckets
        (the padded chunk is the short one).
        """
        table = self._chunks
        for r in range(len(table), n + 1):
            table.append(min((b + self.call_tokens + table[max(0, r - b)][0],
                              1 + table[max(0, r - b)][1], -b) for b in self.lengths))
        out, r = [], n
        while r > 0:
            b = -table[r][2]
            out.append(min(b, r))
            r -= b
        return tuple(sorted(out, reverse=True))

    def first_chunk(self, n: int) -> int:
        """The length of the chunk to prefill next of n tokens left (0 for none)."""
        return self.chunk_lengths(n)[0] if n > 0 else 0

    def row_counts(self, n: int, length: int) -> tuple[int, ...]:
        """Row buckets, largest first, of the cheapest calls for n chunks of one `length`
        bucket: cost = Σ_calls (r · length + call_tokens), a call of r rows taking
        min(r, chunks left); row buckets that `call_fits` refuses are not used."""
        usable = [r for r in self.rows if self.call_fits(r, length)] or [self.rows[0]]
        table = self._rows.setdefault(length, [(0, 0, 0)])
        for k in range(len(table), n + 1):
            table.append(min((r * length + self.call_tokens + table[max(0, k - r)][0],
                              1 + table[max(0, k - r)][1], r) for r in usable))
        out, k = [], n
        while k > 0:
            out.append(table[k][2])
            k -= table[k][2]
        return tuple(sorted(out, reverse=True))
