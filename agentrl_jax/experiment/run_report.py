"""The report stage: RUN_DIR/results.md and RUN_DIR/success.png from what the stages wrote.

results.md holds the test subset before and after RL per task (success, 95% intervals, the
paired difference; `paired_difference.json`), the validation slice's when the run evaluated it
(`validation_paired_difference.json`), the checkpoint chosen on validation where the run chose
one (`experiment/selection.py`), each evaluation's table and first-call summary, the copy
probes and the stage times. success.png plots per-task success of the RL steps' rollouts with
the evaluations before and after as markers (`experiment/report.py`).
"""

from __future__ import annotations

import json
from typing import Any

import ml_collections

from agentrl_jax.controller.task_keys import parse_task_key
from agentrl_jax.evaluation import agentbench
from agentrl_jax.experiment import report
from agentrl_jax.experiment.evaluation_stage import CopyProbeRecord
from agentrl_jax.experiment.metrics import MetricsLog
from agentrl_jax.experiment.run_dir import RunDir

EVALUATIONS = ("validation_before", "validation_after", "eval_before", "eval_after")


def _tasks_of(run: RunDir, name: str) -> dict[str, Any] | None:
    """{task: its row} of the evaluation `name`, None if the run has not written it."""
    path = run.path / f"{name}.json"
    if not path.exists():
        return None
    rows = json.loads(path.read_text())["tasks"]
    return {parse_task_key(k).task: v for k, v in rows.items()}


def write_report(config: ml_collections.ConfigDict, run: RunDir, metrics: MetricsLog) -> str:
    """Writes results.md, the paired differences and success.png; returns the test table."""
    before, after = _tasks_of(run, "eval_before"), _tasks_of(run, "eval_after")
    assert after is not None, "the report follows the evaluation after RL"
    paired = agentbench.paired_comparison(before, after) if before else None
    table = report.results_table(before, after, paired)
    parts = ["# Results\n", "Test subset before and after RL (success %, 95% intervals; "
             "`agentrl_jax/evaluation/protocol.py`):\n", table]
    v_before, v_after = _tasks_of(run, "validation_before"), _tasks_of(run, "validation_after")
    if v_after is None and run.done("select"):   # the chosen checkpoint's, played by `select`
        v_after = _tasks_of(run, f"validation_step_{run.record('select')['step']}")
    if v_before and v_after:   # the slice settings are decided on (`eval.validate`)
        v_paired = agentbench.paired_comparison(v_before, v_after)
        parts += ["Validation slice before and after RL (held-out train indices, for "
                  "decisions):\n", report.results_table(v_before, v_after, v_paired)]
        (run.path / "validation_paired_difference.json").write_text(
            json.dumps(v_paired, indent=1) + "\n")
    for name in EVALUATIONS:
        if (run.path / f"{name}.md").exists():
            parts.append((run.path / f"{name}.md").read_text())
        calls = run.path / f"{name}_first_calls.json"
        if calls.exists():
            parts.append(report.first_call_table(name, json.loads(calls.read_text())))
    validation = _validation_by_step(run)
    if run.done("select"):
        parts.append(report.selection_table(run.record("select")))
    probes = CopyProbeRecord(run.path / "copy_probe.json").entries()
    if probes:
        parts.append(report.copy_probe_table(probes))
    parts.append(report.stage_times(run.stages()))
    if paired is not None:
        (run.path / "paired_difference.json").write_text(json.dumps(paired, indent=1) + "\n")
    (run.path / "results.md").write_text("\n".join(parts))
    records = [{**r, **{parse_task_key(k.removesuffix("/success")).task + "/success": v
                        for k, v in r.items() if k.endswith("/success")}}
               for r in metrics.records("rl")]
    report.plot_success(
        records, list(config.env.tasks), run.path / "success.png",
        before={t: r["success_mean"] for t, r in (before or {}).items()},
        after={t: r["success_mean"] for t, r in after.items()},
        intervals={when: {t: (r["success_interval"]["low"], r["success_interval"]["high"])
                          for t, r in (rows or {}).items()}
                   for when, rows in (("before", before), ("after", after))},
        validation=validation,
        after_step=run.record("select")["step"] if run.done("select") else None)
    return table


def _validation_by_step(run: RunDir) -> dict[str, dict[int, float]]:
    """{task: {step: success}} of the validation slice: before RL (step 0) and at each
    checkpoint the selection compared (`validation_step_N.json`)."""
    names = {0: "validation_before"} if (run.path / "validation_before.json").exists() else {}
    names |= {int(p.stem.removeprefix("validation_step_")): p.stem
              for p in run.path.glob("validation_step_*.json")
              if p.stem.removeprefix("validation_step_").isdigit()}
    by_task: dict[str, dict[int, float]] = {}
    if len(names) < 2:
        return by_task
    for step, name in sorted(names.items()):
        for task, row in (_tasks_of(run, name) or {}).items():
            by_task.setdefault(task, {})[step] = row["success_mean"]
    return by_task
