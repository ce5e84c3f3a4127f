"""Run metrics (JSONL + TensorBoard), resume truncation, the plot and the results table."""

import json

import numpy as np

from agentrl_jax.episode import SampleStatus
from agentrl_jax.evaluation import agentbench
from agentrl_jax.experiment import report
from agentrl_jax.experiment.metrics import MetricsLog
from agentrl_jax.rollout.record import Rollout


def test_metrics_log_writes_jsonl_and_tensorboard_and_truncates_lost_steps(tmp_path):
    log = MetricsLog(tmp_path)
    log.write("sft", 1, {"loss": 2.0})
    for step in (1, 2, 3):
        log.write("rl", step, {"reward_mean": step / 10, "groups_trained": [step],
                               "nan": float("nan")})
    with open(log.path, "a") as f:
        f.write('{"stage": "rl", "step": 4, "torn')   # killed mid-write
    assert [r["step"] for r in log.records("rl")] == [1, 2, 3]
    assert "nan" not in next(log.records("rl"))   # non-finite values are not recorded
    assert log.truncate("rl", after_step=1) == 2
    assert [(r["stage"], r["step"]) for r in log.records()] == [("sft", 1), ("rl", 1)]
    log.close()
    assert list((tmp_path / "tensorboard").glob("events.out.tfevents.*"))


def test_moving_average_is_trailing():
    np.testing.assert_allclose(report.moving_average(np.array([1.0, 3.0, 5.0, 7.0]), 2),
                               [1.0, 2.0, 4.0, 6.0])


def test_plot_and_table(tmp_path):
    records = [{"step": s, "db/success": s / 4, "kg/success": 0.0} for s in (1, 2, 3, 4)]
    path = report.plot_success(records, ["db", "kg", "os"], tmp_path / "p.png",
                               before={"db": 0.0}, after={"db": 1.0},
                               intervals={"after": {"db": (0.6, 1.0)}},
                               validation={"db": {0: 0.1, 2: 0.5, 4: 0.75}}, after_step=2)
    assert path.read_bytes()[:4] == b"\x89PNG"


def test_selection_table_marks_the_chosen_checkpoint_in_step_order():
    table = report.selection_table({"step": 10, "validation_success": {
        "5": 0.4, "15": 0.31, "10": 0.55}})
    rows = [line for line in table.splitlines() if line.startswith("| ") and "---" not in line]
    assert rows[1:] == ["| 5 | 40.0 |", "| 10 | 55.0 (chosen) |", "| 15 | 31.0 |"]
    assert "step 10" in table.splitlines()[0]


def _task(successes):
    """A task of `agentbench.to_json` with one pass over indices 0..n-1."""
    runs = [[Rollout("db-test", i, 0, 0, *([np.zeros(0, np.int32)] * 2), np.zeros(0, np.float32),
                     *([np.zeros(0, np.int32)] * 2), reward=float(s),
                     status=SampleStatus.COMPLETED) for i, s in enumerate(successes)]]
    result = agentbench.summarize_task("db-test", runs)
    return json.loads(json.dumps(agentbench.to_json({"db-test": result})))["tasks"]["db-test"]


def test_results_table_has_intervals_and_the_paired_difference():
    before = {"db": _task([0, 1, 1, 0, 0]), "kg": _task([0, 0, 0, 0, 0])}
    after = {"db": _task([1, 1, 1, 1, 1]), "kg": _task([0, 0, 0, 0, 1])}
    paired = agentbench.paired_comparison(before, after)
    table = report.results_table(before, after, paired)
    # db: 2/5 -> 5/5; Wilson [11.8, 76.9] and [56.6, 100.0]; d = [1,0,0,1,1]: +60.0
    # [-8.0, 128.0] (tests/evaluation/test_intervals.py). Mean of +60 and +20 is +40.
    assert ("| db | 40.0 [11.8, 76.9] | 100.0 [56.6, 100.0] | 40.0 | 100.0 | "
            "+60.0 [-8.0, 128.0] |") in table
    assert "| **average** | 20.0 | 60.0 | 20.0 | 60.0 | +40.0 [3.3, 76.7] (significant) |" in table
    # Without an evaluation before RL, the table still has every row.
    assert "| kg | – | 20.0 [3.6, 62.4] | – | 20.0 | – |" in report.results_table(None, after)


def test_stage_times():
    line = report.stage_times({"demos": {"seconds": 60.0}, "sft": {"seconds": 300.0},
                               "report": {"total_seconds": 1.0}})
    assert line == "stage times: demos 1.0 min, sft 5.0 min; total 6.0 min\n"


def rollout(status, reward):
    empty = np.zeros(0, np.int32)
    return Rollout("db-test", 0, 0, 0, empty, empty, np.zeros(0, np.float32), empty, empty,
                   reward=reward, status=SampleStatus(status))


def test_task_summary_mean_std_and_terminations():
    runs = [
        [rollout("completed", 1.0), rollout("completed", 0.0)],          # pass 1: 1/2
        [rollout("completed", 1.0), rollout("task limit reached", 0.0)],  # pass 2: 1/2
        [rollout("agent validation failed", 0.0), rollout("agent context limit", 0.5)],
    ]
    r = agentbench.summarize_task("db-test", runs)
    assert r.episodes == 6
    np.testing.assert_allclose(r.success_per_run, [0.5, 0.5, 0.0])
    np.testing.assert_allclose(r.success_mean, 1 / 3)
    np.testing.assert_allclose(r.success_std, np.std([0.5, 0.5, 0.0]))
    np.testing.assert_allclose(r.score_per_run, [0.5, 0.5, 0.25])
    assert r.terminations == {"completed": 0.5, "task_limit_reached": 1 / 6,
                              "invalid_action": 1 / 6, "context_limit": 1 / 6,
                              "task_error": 0.0}
    out = agentbench.to_json({"db-test": r})
    assert json.loads(json.dumps(out))["average"]["success_mean"] == r.success_mean
    assert "| db-test | 6 | 33.3 ± 23.6 |" in agentbench.to_markdown({"db-test": r})


def test_copy_probe_table_has_a_row_per_probe():
    from agentrl_jax.experiment import report

    table = report.copy_probe_table({
        "warm_start": {"copy_probe_nll": 8.1234, "copy_probe_ln_v": 8.32},
        "rl_step_5": {"copy_probe_nll": 0.5, "copy_probe_ln_v": 8.32}})
    rows = [line for line in table.splitlines() if line.startswith("| ")][2:]
    assert rows == ["| warm start | 8.123 | 8.32 |", "| rl step 5 | 0.500 | 8.32 |"]
