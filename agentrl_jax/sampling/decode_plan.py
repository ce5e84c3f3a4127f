"""How the engine splits its running rows into decode calls.

A decode call reads every row's context up to one width, the context bucket of its longest row,
so a row 600 tokens in pays for 4,096 when it decodes beside one 3,900 tokens in. On the CPU a
decode step's time is close to linear in rows × width (the scratch model at batch 16: 8.6, 16
and 31 ms a step at widths 1,024, 2,048 and 4,096 with every row 600 tokens in;
docs/performance.md). Splitting the rows by context into several calls reads less, at the cost
of reading the weights (and dispatching) once more per call.

`DecodePlanner` minimises one cost, in row-tokens of context read: Σ over calls of rows bucket ×
context bucket + `call_tokens`, a call's fixed cost in the same units. `call_tokens` large keeps
one call for all rows (the engine before); its default derives from the model
(`call_tokens_of`).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

from agentrl_jax.sampling.prefill_plan import bucket_of

# A decode step reads each context token's k/v about twice on the CPU (the gather's copy, then
# the attention's read of it) and the weights once: the measured fixed cost of a call was ~2,000
# row-tokens on the scratch model and ~9,000 on SmolLM2 at 8 layers, against 2,100 and 9,400 by
# `call_tokens_of` with this factor.
CONTEXT_READS_PER_STEP = 2


def call_tokens_of(weight_bytes: int, kv_bytes_per_token: int) -> int:
    """A decode call's fixed cost in row-tokens when a step is bound by the bytes it reads:

    call_tokens = weight_bytes / (CONTEXT_READS_PER_STEP · kv_bytes_per_token).
    """
    return max(0, round(weight_bytes / (CONTEXT_READS_PER_STEP * kv_bytes_per_token)))


class DecodePlanner:
    """Groups of rows, one decode call each, that read the least context in all."""

    def __init__(self, widths: Sequence[int], rows: Sequence[int], call_tokens: int):
        """Args:
          widths: the context buckets, sorted; rows: the batch buckets, sorted (the largest is
            at least the rows that decode at once).
          call_tokens: a call's fixed cost in row-tokens of context (>= 0).
        """
        if call_tokens < 0:
            raise ValueError(f"call_tokens must be >= 0, got {call_tokens}")
        self.widths, self.rows, self.call_tokens = tuple(widths), tuple(rows), call_tokens

    def groups(self, needs: Sequence[int]) -> list[list[int]]:
        """Indices into `needs` (each row's context width needed), one list per call, shortest
        contexts first; every index in exactly one list."""
        order = sorted(range(len(needs)), key=lambda i: needs[i])
        widths = tuple(bucket_of(self.widths, needs[i]) for i in order)
        bounds = self._bounds(widths)
        return [order[lo:hi] for lo, hi in zip((0, *bounds[:-1]), bounds, strict=True)]

    def call_cost(self, rows: int, width: int) -> int:
        """One call's cost: `rows` rows read up to context bucket `width`."""
        return bucket_of(self.rows, rows) * width + self.call_tokens

    @functools.lru_cache(maxsize=4096)  # noqa: B019 - planners live as long as their engine
    def _bounds(self, widths: tuple[int, ...]) -> tuple[int, ...]:
        """Ends of the groups of the sorted context buckets `widths`, by dynamic programming:

        best(0) = 0; best(i) = min over j < i of best(j) + call_cost(i - j, widths[i - 1]), a
        group being a run of the sorted rows (a row never decodes in a wider call than a longer
        row's; the tests check this against every partition). Ties go to fewer calls.
        """
        n = len(widths)
        best: list[tuple[int, int, int]] = [(0, 0, 0)]  # (cost, calls, start of last group)
        for i in range(1, n + 1):
            best.append(min((best[j][0] + self.call_cost(i - j, widths[i - 1]), best[j][1] + 1, j)
                            for j in range(max(0, i - self.rows[-1]), i)))
        bounds, i = [], n
        while i > 0:
            bounds.append(i)
            i = best[i][2]
        return tuple(reversed(bounds))
