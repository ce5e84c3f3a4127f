"""The fresh-clone run's summary reads a run directory as the job writes it."""

import json

import pytest

from benchmarks import first_run


def _evaluation(wins_by_task: dict[str, list[int]]) -> dict:
    return {"tasks": {f"{task}-test": {"outcomes": [
        {"index": i, "run": 0, "success": s} for i, s in enumerate(wins)]
        # a second pass, which the first-pass figures must leave out
        + [{"index": 0, "run": 1, "success": 1}]} for task, wins in wins_by_task.items()}}


def _paired(tasks: list[str]) -> dict:
    entry = {"estimate": 0.25, "low": 0.1, "high": 0.4, "n": 4}
    return {"tasks": {t: entry for t in tasks}, "mean": {"estimate": 0.2, "low": 0.0,
                                                           "high": 0.3, "n": 8}}


def _run_dir(path, wins_before, wins_after):
    path.mkdir()
    (path / "stages.json").write_text(json.dumps(
        {"sft": {"seconds": 30.0}, "rl": {"seconds": 12.5}}))
    (path / "metrics.jsonl").write_text("\n".join(json.dumps(r) for r in (
        [{"stage": "sft", "step": i} for i in range(4)] + [{"stage": "rl", "step": 1}])))
    (path / "eval_before.json").write_text(json.dumps(_evaluation(wins_before)))
    (path / "eval_after.json").write_text(json.dumps(_evaluation(wins_after)))
    (path / "paired_difference.json").write_text(json.dumps(_paired(list(wins_before))))
    return path


def test_run_figures_per_stage_and_task(tmp_path):
    run = _run_dir(tmp_path / "run", {"db": [0, 1, 0, 0], "kg": [0, 0, 0, 0]},
                   {"db": [1, 1, 0, 0], "kg": [0, 0, 0, 1]})
    f = first_run.run_figures(run, "agentbench")
    assert f["agentbench_sft_seconds"] == 30.0 and f["agentbench_rl_seconds"] == 12.5
    assert f["agentbench_total_seconds"] == 42.5
    assert f["agentbench_sft_seconds_per_step"] == 7.5   # 30 s over the 4 sft records
    assert (f["db_before_success"], f["db_after_success"], f["db_before_n"]) == (0.25, 0.5, 4)
    assert f["kg_before_success"] == 0.0 and f["kg_before_low"] == 0.0
    assert 0.0 < f["kg_before_high"] < 1.0 and f["db_after_low"] < 0.5 < f["db_after_high"]
    assert f["db_paired_estimate"] == 0.25 and f["kg_paired_n"] == 4
    assert f["agentbench_mean_paired_estimate"] == 0.2


def test_one_task_has_no_mean(tmp_path):
    run = _run_dir(tmp_path / "run", {"tictactoe": [1, 0]}, {"tictactoe": [1, 1]})
    f = first_run.run_figures(run, "tictactoe")
    assert f["tictactoe_after_success"] == 1.0
    assert not any(k.startswith("tictactoe_mean") for k in f)


def test_a_run_without_its_evaluation_is_refused(tmp_path):
    run = _run_dir(tmp_path / "run", {"db": [0]}, {"db": [1]})
    (run / "eval_after.json").unlink()
    with pytest.raises(FileNotFoundError):
        first_run.run_figures(run, "agentbench")


def test_the_validation_slice_is_summarised_where_the_run_evaluated_it(tmp_path):
    run = _run_dir(tmp_path / "run", {"db": [0, 1]}, {"db": [1, 1]})
    assert not any(k.startswith("validation_") for k in first_run.run_figures(run, "agentbench"))
    for when, wins in (("before", [0, 0, 1]), ("after", [1, 0, 1])):
        (run / f"validation_{when}.json").write_text(json.dumps(
            {"tasks": {"db-train": {"outcomes": [{"index": i, "run": 0, "success": s}
                                                 for i, s in enumerate(wins)]}}}))
    (run / "validation_paired_difference.json").write_text(json.dumps(_paired(["db"])))
    f = first_run.run_figures(run, "agentbench")
    assert f["validation_db_before_n"] == 3 and f["validation_db_after_success"] == 2 / 3
    assert f["validation_db_paired_estimate"] == 0.25 and f["db_after_success"] == 1.0
