"""The end of a run: a results table (before/after RL, intervals, the paired difference), the
stage times and a plot of per-task success.

The plot shows, per task, the success rate of the training rollouts at each RL step (a moving
average over `smooth` steps, since a step holds few episodes of each task), with the test-split
evaluations before and after RL as markers at the first and last step, and the validation
slice's success at the checkpoints compared for the final policy where the run chose one.
"""

from __future__ import annotations

import pathlib
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from agentrl_jax.evaluation.agentbench import format_interval


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
                 after: Mapping[str, float] | None = None,
                 intervals: Mapping[str, Mapping[str, tuple[float, float]]] | None = None,
                 validation: Mapping[str, Mapping[int, float]] | None = None,
                 after_step: int | None = None, smooth: int = 5) -> pathlib.Path:
    """Writes the per-task success plot as a PNG.

    `intervals`: {"before"|"after": {task: (low, high)}}, drawn as error bars on the test points.
    `validation`: {task: {step: success}} on the validation slice (the checkpoints compared by
    `eval.select_every`), drawn dashed. `after_step`: the RL step of the policy tested after
    RL (default the last).
    """
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
        for when, points, x, marker in (("before", before, 0, "o"),
                                        ("after", after, after_step or last_step, "*")):
            if not points or task not in points:
                continue
            low_high = (intervals or {}).get(when, {}).get(task)
            if low_high is not None:
                ax.errorbar([x], [points[task]], fmt="none", ecolor=color, alpha=0.5, capsize=3,
                            yerr=[[points[task] - low_high[0]], [low_high[1] - points[task]]])
            label = f"{task} (test)" if task not in curves and when == "after" else None
            ax.scatter([x], [points[task]], color=color, marker=marker,
                       s=80 if marker == "*" else 36, label=label)
        if validation and validation.get(task):
            steps_v, values_v = zip(*sorted(validation[task].items()), strict=True)
            ax.plot(steps_v, values_v, color=color, linestyle="--", marker="x",
                    label=f"{task} (validation)")
    ax.set_xlabel("RL step")
    ax.set_ylabel("success rate")
    ax.set_ylim(-0.02, 1.02)
    ax.set_title("Success per task: training episodes (lines), validation (dashed), test "
                 "before (o) / after (*) RL, 95% intervals", fontsize=9)
    ax.legend(loc="upper left", fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    path = pathlib.Path(path)
    fig.savefig(path)
    plt.close(fig)
    return path


def selection_table(record: Mapping[str, Any]) -> str:
    """Markdown: the validation success of each checkpoint compared, and the one chosen (the
    `select` stage's marker: {"step": chosen, "validation_success": {step: success}})."""
    chosen = int(record["step"])
    rows = [f"| {step} | {100 * success:.1f}{' (chosen)' if int(step) == chosen else ''} |"
            for step, success in sorted(record["validation_success"].items(),
                                        key=lambda item: int(item[0]))]
    return "\n".join([f"Final policy: the RL checkpoint of step {chosen}, the best on the "
                      "validation slice (mean success %, `experiment/selection.py`):\n",
                      "| RL step | validation success |", "| --- | --- |", *rows]) + "\n"


def results_table(before: Mapping[str, Mapping[str, Any]] | None,
                  after: Mapping[str, Mapping[str, Any]],
                  paired: Mapping[str, Any] | None = None) -> str:
    """Markdown: per task, test success before and after RL with 95% intervals, WebShop-style
    score, and the paired difference (after − before on the same indices) with its interval.

    `before`/`after` map task -> a task of `evaluation.agentbench.to_json` (`success_mean`,
    `score_mean`, `success_interval`); `paired` is `agentbench.paired_comparison` of the two.
    """
    def success(row: Mapping[str, Any] | None) -> str:
        if row is None:
            return "–"
        interval = row.get("success_interval")
        ci = f" {format_interval(interval)}" if interval else ""
        return f"{100 * row['success_mean']:.1f}{ci}"

    def difference(interval: Mapping[str, Any] | None) -> str:
        if interval is None:
            return "–"
        return f"{100 * interval['estimate']:+.1f} {format_interval(interval)}"

    paired_tasks = (paired or {}).get("tasks", {})
    lines = ["| task | success before RL (%) | success after RL (%) | score before (%) | "
             "score after (%) | paired difference (points) |",
             "| --- | ---: | ---: | ---: | ---: | ---: |"]
    for task in after:
        row_before = (before or {}).get(task)
        score_before = "–" if row_before is None else f"{100 * row_before['score_mean']:.1f}"
        lines.append(f"| {task} | {success(row_before)} | {success(after[task])} | "
                     f"{score_before} | {100 * after[task]['score_mean']:.1f} | "
                     f"{difference(paired_tasks.get(task))} |")

    def mean(rows: Mapping[str, Mapping[str, Any]], key: str = "success_mean") -> str:
        return f"{100 * float(np.mean([r[key] for r in rows.values()])):.1f}"

    significant = ""
    if paired is not None:
        significant = " (significant)" if paired["significant"] else " (not significant)"
    lines.append(f"| **average** | {mean(before) if before else '–'} | {mean(after)} | "
                 f"{mean(before, 'score_mean') if before else '–'} | "
                 f"{mean(after, 'score_mean')} | "
                 f"{difference((paired or {}).get('mean'))}{significant} |")
    return "\n".join(lines) + "\n"


def stage_times(stages: Mapping[str, Mapping[str, Any]]) -> str:
    """One line: each finished stage's seconds (as `experiment.run_dir.RunDir` records them)."""
    parts = [f"{name} {info['seconds'] / 60:.1f} min" for name, info in stages.items()
             if "seconds" in info]
    total = sum(info.get("seconds", 0.0) for info in stages.values())
    return f"stage times: {', '.join(parts)}; total {total / 60:.1f} min\n"


def copy_probe_table(entries: Mapping[str, Mapping[str, float]]) -> str:
    """A line per copy probe (RUN_DIR/copy_probe.json): its NLL against chance."""
    lines = ["Copy probe (NLL on random-token repeats at random offsets; 0 copies, ln V is "
             "chance; `evaluation/copy_probe.py`):\n",
             "| when | NLL | ln V |", "| --- | --- | --- |"]
    for name, figures in entries.items():
        lines.append(f"| {name.replace('_', ' ')} | {figures['copy_probe_nll']:.3f} | "
                     f"{figures['copy_probe_ln_v']:.2f} |")
    return "\n".join(lines) + "\n"


def first_call_table(name: str, summary: Mapping[str, Mapping[str, float]]) -> str:
    """A row per task of `evaluation.first_call.summarize`'s figures for evaluation `name`."""
    lines = [f"First calls and copying, {name.replace('_', ' ')} (`evaluation/first_call.py`):\n",
             "| task | episodes | well formed | oracle's first tool | copy rate |",
             "| --- | --- | --- | --- | --- |"]
    for task, row in summary.items():
        lines.append(f"| {task} | {int(row['episodes'])} | {100 * row['well_formed']:.0f}% | "
                     f"{100 * row['oracle_first_tool']:.0f}% | {100 * row['copy_rate']:.0f}% |")
    return "\n".join(lines) + "\n"
