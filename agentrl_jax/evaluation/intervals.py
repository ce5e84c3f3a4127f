"""95% intervals for evaluation results: a task's success rate, a mean, a paired difference.

Pure functions on small arrays. The conventions (what is one observation) are the evaluation
protocol's (`docs/evaluation.md`):

  * a task's success rate: every episode is a Bernoulli trial; Wilson's score interval, which
    stays inside [0, 1] and is not degenerate at 0/n or n/n (a Wald interval would be [0, 0]);
  * a paired before/after difference on one task: one observation per test index,
    d_i = (success rate of index i after) − (before), averaged over the passes; Student's t
    interval of the mean of the d_i;
  * the mean over tasks of the per-task mean differences (every task weighs the same, as in
    AgentBench): the tasks are independent samples, so the variance of the mean is the sum of
    the per-task variances of the mean over T²; Welch–Satterthwaite degrees of freedom.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from typing import TypeVar

import numpy as np
from scipy import stats

K = TypeVar("K")  # an index: the same keys on both sides

LEVEL = 0.95


@dataclasses.dataclass(frozen=True)
class Interval:
    """An estimate and its two-sided interval; `low`/`high` are nan when undefined (n < 2)."""

    estimate: float
    low: float
    high: float
    n: int

    def excludes_zero(self) -> bool:
        return bool(self.low > 0 or self.high < 0)

    def to_json(self) -> dict[str, float | int | None]:
        """Nan bounds as None (JSON has no NaN)."""
        def finite(x: float) -> float | None:
            return None if math.isnan(x) else float(x)

        return {"estimate": float(self.estimate), "low": finite(self.low),
                "high": finite(self.high), "n": self.n}


def wilson(successes: int, n: int, level: float = LEVEL) -> Interval:
    """Wilson's score interval of a binomial proportion p̂ = k / n.

        centre = (p̂ + z²/2n) / (1 + z²/n)
        half   = z / (1 + z²/n) · sqrt(p̂(1 − p̂)/n + z²/4n²),   z = Φ⁻¹((1 + level) / 2)
    """
    if not 0 <= successes <= n:
        raise ValueError(f"need 0 <= successes <= n, got {successes} of {n}")
    if n == 0:
        return Interval(math.nan, math.nan, math.nan, 0)
    z = float(stats.norm.ppf((1 + level) / 2))
    p = successes / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z / denom * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return Interval(p, max(0.0, centre - half), min(1.0, centre + half), n)


def mean_interval(values: Sequence[float] | np.ndarray, level: float = LEVEL) -> Interval:
    """Student's t interval of a mean:  x̄ ± t_{(1+level)/2, n−1} · s / √n  (s unbiased)."""
    x = np.asarray(values, np.float64)
    n = int(x.size)
    if n == 0:
        return Interval(math.nan, math.nan, math.nan, 0)
    mean = float(x.mean())
    if n < 2:
        return Interval(mean, math.nan, math.nan, n)
    half = float(stats.t.ppf((1 + level) / 2, n - 1)) * float(x.std(ddof=1)) / math.sqrt(n)
    return Interval(mean, mean - half, mean + half, n)


def paired_differences(before: Mapping[K, float], after: Mapping[K, float]
                       ) -> np.ndarray:
    """d_i = after[i] − before[i] over the indices, which must be the same on both sides."""
    if set(before) != set(after):
        missing = sorted(map(str, set(before) ^ set(after)))[:5]
        raise ValueError(f"a paired difference needs the same indices before and after; "
                         f"these are on one side only: {missing}")
    keys = sorted(before, key=str)
    return np.asarray([after[k] - before[k] for k in keys], np.float64)


def mean_of_task_means(per_task: Sequence[Sequence[float] | np.ndarray],
                       level: float = LEVEL) -> Interval:
    """The interval of D = (1/T) Σ_t x̄_t over T independent tasks.

        SE² = (1/T²) Σ_t v_t,   v_t = s_t² / n_t
        df  = (Σ_t v_t)² / Σ_t (v_t² / (n_t − 1))        (Welch–Satterthwaite)
        D ± t_{(1+level)/2, df} · SE

    Undefined (nan bounds) when a task has fewer than two observations. With every v_t = 0 the
    interval is the point D.
    """
    samples = [np.asarray(x, np.float64) for x in per_task]
    if not samples or any(x.size == 0 for x in samples):
        return Interval(math.nan, math.nan, math.nan, 0)
    t_count = len(samples)
    estimate = float(np.mean([x.mean() for x in samples]))
    n_total = int(sum(x.size for x in samples))
    if any(x.size < 2 for x in samples):
        return Interval(estimate, math.nan, math.nan, n_total)
    v = np.asarray([x.var(ddof=1) / x.size for x in samples])
    if not v.sum() > 0:
        return Interval(estimate, estimate, estimate, n_total)
    se = math.sqrt(v.sum()) / t_count
    df = v.sum() ** 2 / sum(vt * vt / (x.size - 1) for vt, x in zip(v, samples, strict=True))
    half = float(stats.t.ppf((1 + level) / 2, df)) * se
    return Interval(estimate, estimate - half, estimate + half, n_total)
