"""The end of a run: a results table (before/after RL) and a plot of per-task success.

The plot shows, per task, the success rate of the training rollouts at each RL step (a moving
average over `smooth` steps, since a step holds few episodes of each task), with the test-split
evaluations before and after RL as markers at the first and last step.
"""

from __future__ import annotations

import pathlib
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np


def success_curves(records: Sequence[Mapping[str, Any]], tasks: Sequence[str]
                   ) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Per task: (steps, success of that step's rollouts) from RL metric records."""
    curves = {}
    for task in tasks:
        points = [(r["step"], r[f"{task}/success"]) for r in records if f"{task}/success" in r]
        if points:
            steps, values = zip(*sorted(points), strict=True)
            curves[task] = (np.asarray(steps), np.asarray(values, np.float64))
    return curves


def moving_average(values: np.ndarray, window: int) -> np.ndarray:
    """Trailing mean over up to `window` values (shorter at the start)."""
    csum = np.cumsum(np.concatenate([[0.0], values]))
    idx = np.arange(1, len(values) + 1)
    lo = np.maximum(idx - window, 0)
    return (csum[idx] - csum[lo]) / (idx - lo)


def plot_success(records: Sequence[Mapping[str, Any]], tasks: Sequence[str],
                 path: str | pathlib.Path, *, before: Mapping[str, float] | None = None,
                 after: Mapping[str, float] | None = None, smooth: int = 5) -> pathlib.Path:
    """Writes the per-task success plot as a PNG."""
    import matplotlib

    matplotlib.use("Agg")  # no display on servers
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4.5), dpi=120)
    curves = success_curves(records, tasks)
    last_step = max((int(s[-1]) for s, _ in curves.values()), default=1)
    for i, task in enumerate(tasks):
        color = f"C{i}"
        if task in curves:
            steps, values = curves[task]
            ax.plot(steps, moving_average(values, smooth), color=color, label=f"{task} (train)")
        if before and task in before:
            ax.scatter([0], [before[task]], color=color, marker="o")
        if after and task in after:
            ax.scatter([last_step], [after[task]], color=color, marker="*", s=80)
    ax.set_xlabel("RL step")
    ax.set_ylabel("success rate")
    ax.set_ylim(-0.02, 1.02)
    ax.set_title("Per-task success: training rollouts (lines), test split before (o) / after (*)")
    ax.legend(loc="upper left", fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    path = pathlib.Path(path)
    fig.savefig(path)
    plt.close(fig)
    return path


def results_table(before: Mapping[str, Mapping[str, float]] | None,
                  after: Mapping[str, Mapping[str, float]]) -> str:
    """Markdown: per task, test success (and score) before and after RL.

    `before`/`after` map task -> {"success_mean", "success_std", "score_mean"} (the `tasks`
    part of `evaluation.agentbench.to_json`).
    """
    def cell(row: Mapping[str, float] | None) -> str:
        if row is None:
            return "–"
        return f"{100 * row['success_mean']:.1f} ± {100 * row['success_std']:.1f}"

    lines = ["| task | success before RL (%) | success after RL (%) | score after RL (%) |",
             "| --- | ---: | ---: | ---: |"]
    for task in after:
        lines.append(f"| {task} | {cell((before or {}).get(task))} | {cell(after[task])} | "
                     f"{100 * after[task]['score_mean']:.1f} |")
    def mean(rows: Mapping[str, Mapping[str, float]], key: str = "success_mean") -> str:
        return f"{100 * float(np.mean([r[key] for r in rows.values()])):.1f}"

    lines.append(f"| **average** | {mean(before) if before else '–'} | {mean(after)} | "
                 f"{mean(after, 'score_mean')} |")
    return "\n".join(lines) + "\n"
