"""BFCL v3's leaderboard numbers from per-category accuracies.

The aggregation follows `bfcl_eval/eval_checker/eval_runner_helper.py::generate_leaderboard_csv`
of bfcl-eval 2025.6.8 (that module needs pandas and BFCL's model registry, so the rules are
restated here rather than imported):

  non-live  simple = unweighted mean of (python simple, java, javascript); the AST summary is
            the unweighted mean of (simple, multiple, parallel, parallel_multiple); the
            non-live overall adds irrelevance to those four, unweighted.
  live      AST summary and overall are means weighted by example count, of the four live AST
            categories (overall: plus live_irrelevance and live_relevance).
  multi     unweighted mean of base, miss_func, miss_param, long_context.
  overall   unweighted mean of the live, non-live and multi-turn overalls.
  also      relevance = live_relevance; irrelevance = unweighted mean of both irrelevances.

A category that was not evaluated counts as accuracy 0 with its full dataset size, as in BFCL;
a summary that contains one is shown as N/A (`display` None), except the overalls, which BFCL
always shows. With `--limit`, the weights of the live means are the sampled counts.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from agentrl_jax.evaluation import bfcl_data


@dataclasses.dataclass(frozen=True)
class Score:
    """An accuracy over `count` examples; `display` is None where BFCL prints N/A."""

    accuracy: float
    count: int
    display: float | None

    def as_dict(self) -> dict[str, Any]:
        return {"accuracy": self.accuracy, "count": self.count, "display": self.display}


def _mean(scores: Sequence[Score], weighted: bool, na_if_missing: bool = True) -> Score:
    count = sum(s.count for s in scores)
    if weighted:
        accuracy = sum(s.accuracy * s.count for s in scores) / count if count else 0.0
    else:
        accuracy = sum(s.accuracy for s in scores) / len(scores)
    missing = any(s.display is None for s in scores)
    return Score(accuracy, count, None if missing and na_if_missing else accuracy)


def leaderboard(
    accuracies: Mapping[str, tuple[float, int]],
    dataset_size: Callable[[str], int] = bfcl_data.dataset_size,
) -> dict[str, Score]:
    """BFCL's leaderboard columns from {category: (accuracy, count)} of evaluated categories."""

    def cat(name: str) -> Score:
        if name in accuracies:
            accuracy, count = accuracies[name]
            return Score(accuracy, count, accuracy)
        return Score(0.0, dataset_size(name), None)

    def unweighted(*scores: Score, na: bool = True) -> Score:
        return _mean(scores, weighted=False, na_if_missing=na)

    def weighted(*scores: Score, na: bool = True) -> Score:
        return _mean(scores, weighted=True, na_if_missing=na)

    simple = unweighted(cat("simple"), cat("java"), cat("javascript"))
    non_live_ast = [simple, cat("multiple"), cat("parallel"), cat("parallel_multiple")]
    live_ast = [cat(c) for c in ("live_simple", "live_multiple", "live_parallel",
                                 "live_parallel_multiple")]
    multi = [cat(c) for c in ("multi_turn_base", "multi_turn_miss_func", "multi_turn_miss_param",
                              "multi_turn_long_context")]
    non_live = unweighted(*non_live_ast, cat("irrelevance"), na=False)
    live = weighted(*live_ast, cat("live_irrelevance"), cat("live_relevance"), na=False)
    multi_turn = unweighted(*multi, na=False)
    return {
        "overall": unweighted(live, non_live, multi_turn, na=False),
        "non_live": non_live,
        "non_live_ast": unweighted(*non_live_ast),
        "non_live_simple": simple,
        "live": live,
        "live_ast": weighted(*live_ast),
        "multi_turn": multi_turn,
        "relevance": cat("live_relevance"),
        "irrelevance": unweighted(cat("irrelevance"), cat("live_irrelevance")),
    }
