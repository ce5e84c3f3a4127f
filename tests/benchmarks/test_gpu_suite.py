"""The accelerator suite (benchmarks/gpu_suite.py) on CPU: every part on tiny shapes reports every
key; a failing part loses only its own figures; a part that does not fit the budget is skipped
with the reason; the shipped wheels close over their requirements."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
import time
import zipfile

import pytest

from benchmarks import gpu_packages, gpu_suite

REPO_ROOT = pathlib.Path(__file__).resolve().parents[2]


THIS_MODULE = "tests.benchmarks.test_gpu_suite"


def crash(options) -> None:
    """A part whose process dies without a word (as one killed for memory does)."""
    os._exit(3)


def report_then_crash(options) -> None:
    gpu_suite.progress({"dying_first": 1.0})
    os._exit(4)


def hang(options) -> None:
    gpu_suite.progress({"slow_first": 1.0})
    time.sleep(3600)


def env() -> dict[str, str]:
    out = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    out.pop("XLA_FLAGS", None)   # the suite sees this machine's one CPU device
    return out


def run_tiny_suite(tmp_path: pathlib.Path, *flags: str) -> dict:
    out = tmp_path / "gpu_suite.json"
    done = subprocess.run(
        # No budget: how long a part takes on a loaded CPU is not what these tests check.
        [sys.executable, "-m", "benchmarks.gpu_suite", "--tiny", "--out", str(out),
         "--work_dir", str(tmp_path / "work"), "--budget_s=1e6", *flags],
        cwd=REPO_ROOT, env=env(), capture_output=True, text=True, timeout=3000)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return json.loads(out.read_text())


def assert_measured(figures: dict, parts: list[str]) -> None:
    """Every key of `parts` (and the derived ones) has a value; no part failed or was skipped."""
    keys = [k for p in gpu_suite.PARTS if p.name in parts and p.name != "extras" for k in p.keys]
    missing = [k for k in (*keys, *gpu_suite.DERIVED) if figures.get(k) is None]
    assert not missing, {k: v for k, v in figures.items() if k.startswith(("error_", "skip"))}
    assert not [k for k in figures if k.startswith("error_")]
    assert not [k for k in figures if k.startswith("skipped_") and k[8:] in parts]
    for key in (*(k for p in gpu_suite.PARTS for k in p.keys), "jax", "machine", "total_s"):
        assert key in figures   # every part's keys, null where it did not run (extras: yet)
    assert figures["tiny"] is True


def test_tiny_suite_measures_every_accelerator_figure(tmp_path):
    """The parts that measure the accelerator (the learning run is the slow test below, and its
    job is launch.local's fast mode, tested in tests/launch)."""
    parts = ["peaks", "sampler", "train", "extras"]
    figures = run_tiny_suite(tmp_path, f"--parts={','.join(parts)}")
    assert_measured(figures, parts)
    assert all(figures[k] is None for k in gpu_suite.PARTS[3].keys)
    assert figures["skipped_learn"] == "not among --parts"
    assert figures["smollm2_135m_decode_tok_s_b256"] > 0
    assert figures["qwen25_1_5b_mfu_vs_matmul_peak"] == pytest.approx(
        figures["qwen25_1_5b_train_model_tflops"] / figures["matmul_bf16_tflops"])
    assert figures["smollm2_135m_hbm_fraction_b64"] == pytest.approx(
        figures["smollm2_135m_achieved_gbps_b64"] / figures["hbm_copy_gbps"])


@pytest.mark.slow
def test_tiny_suite_reports_every_key(tmp_path):
    figures = run_tiny_suite(tmp_path)
    assert_measured(figures, [p.name for p in gpu_suite.PARTS])
    assert figures["smollm2_learn_exit"] == 0
    assert all(0 <= figures[f"smollm2_success_{w}"] <= 1 for w in ("before", "after"))
    assert all(figures[f"smollm2_{s}_s"] > 0 for s in gpu_suite.LEARN_STAGES)


def test_a_failing_part_loses_only_its_own_figures(tmp_path):
    peaks = gpu_suite.PARTS[0]
    broken = gpu_suite.Part("broken", "benchmarks.gpu_suite:no_such_part", ("broken_figure",),
                            1, 1)
    crashing = gpu_suite.Part("crashing", f"{THIS_MODULE}:crash", ("crashing_figure",), 1, 1)
    options = gpu_suite.Options(tiny=True, work_dir=str(tmp_path))
    figures = gpu_suite.run_suite([broken, crashing, peaks], budget_s=600, options=options)

    assert figures["broken_figure"] is None and "no_such_part" in figures["error_broken"]
    assert figures["crashing_figure"] is None
    assert figures["error_crashing"] == "the child process exited with 3 before it finished"
    assert figures["hbm_copy_gbps"] > 0 and figures["matmul_bf16_tflops"] > 0
    assert "error_peaks" not in figures


def test_a_part_that_dies_keeps_what_it_reported(tmp_path):
    dying = gpu_suite.Part("dying", f"{THIS_MODULE}:report_then_crash",
                           ("dying_first", "dying_second"), 1, 1)
    figures = gpu_suite.run_suite([dying], budget_s=600,
                                  options=gpu_suite.Options(tiny=True, work_dir=str(tmp_path)))
    assert figures["dying_first"] == 1.0 and figures["dying_second"] is None
    assert figures["error_dying"] == ("the child process exited with 4 before it finished "
                                      "(its figures so far are kept)")


def test_a_part_over_the_budget_is_skipped_with_the_reason(tmp_path):
    big = gpu_suite.Part("big", "benchmarks.gpu_suite:part_peaks", ("hbm_copy_gbps",), 10, 500)
    figures = gpu_suite.run_suite([big], budget_s=60,
                                  options=gpu_suite.Options(tiny=True, work_dir=str(tmp_path)))
    assert figures["hbm_copy_gbps"] is None
    assert figures["skipped_big"] == "needs ~500 s, 60 s left of the 60 s budget"
    assert "part_seconds_big" not in figures


def test_a_part_past_the_budget_is_killed(tmp_path, monkeypatch):
    monkeypatch.setattr(gpu_suite, "KILL_GRACE_S", 1.0)
    slow = gpu_suite.Part("slow", f"{THIS_MODULE}:hang", ("slow_first", "slow_second"), 0, 0)
    figures = gpu_suite.run_suite([slow], budget_s=20,   # time enough to start and report
                                  options=gpu_suite.Options(tiny=True, work_dir=str(tmp_path)))
    assert figures["slow_second"] is None
    assert figures["slow_first"] == 1.0   # reported before the kill
    assert figures["error_slow"].startswith("killed at the budget after")
    assert figures["error_slow"].endswith("(its figures so far are kept)")


def test_learning_figures_from_a_partial_run_directory(tmp_path):
    (tmp_path / "stages.json").write_text(json.dumps({
        "demos": {"finished": 110.0}, "sft": {"finished": 150.0},
        "eval_before": {"finished": 175.0}}))
    (tmp_path / "eval_before.json").write_text(json.dumps({
        "average": {"success_mean": 0.25},
        "tasks": {"db-test": {"success_mean": 0.5}, "webshop-test": {"success_mean": 0.0}}}))
    figures = gpu_suite.learning_figures(tmp_path, started=100.0)
    assert figures == {"smollm2_demos_s": 10.0, "smollm2_warm_start_s": 40.0,
                       "smollm2_eval_before_s": 25.0, "smollm2_success_before": 0.25,
                       "smollm2_success_before_db": 0.5, "smollm2_success_before_webshop": 0.0}


def test_the_gpu_learning_run_fits_the_launcher():
    from agentrl_jax.dataclass_config import dataclass_from
    from agentrl_jax.experiment import rl_stage
    from agentrl_jax.sampling import EngineConfig
    from configs import local_smollm2

    c = local_smollm2.get_config("gpu")
    assert tuple(c.env.tasks) == local_smollm2.GPU_TASKS and c.eval.per_task == 20
    rl_stage.check_context_fits_training(c.rl)
    dataclass_from(c.rl.engine, EngineConfig)
    with pytest.raises(ValueError, match="unknown mode"):
        local_smollm2.get_config("tpu")


def _wheel(directory: pathlib.Path, name: str, requires: list[str]) -> None:
    path = directory / f"{name}-1.0-py3-none-any.whl"
    meta = "".join(f"Requires-Dist: {r}\n" for r in requires)
    with zipfile.ZipFile(path, "w") as z:
        z.writestr(f"{name}-1.0.dist-info/METADATA", f"Name: {name}\nVersion: 1.0\n{meta}")


def test_wheel_check_finds_unmet_and_duplicate_requirements(tmp_path, monkeypatch):
    monkeypatch.setattr(gpu_packages, "SHIPPED", ("alpha", "beta"))
    _wheel(tmp_path, "alpha", ["numpy>=2", "beta", "pywin32; sys_platform == 'win32'",
                               "extra-thing; extra == 'docs'"])
    _wheel(tmp_path, "beta", [])
    assert gpu_packages.check(tmp_path) == []

    _wheel(tmp_path, "gamma", ["not-on-the-machine>=1; python_version >= '3.10'"])
    (tmp_path / "beta-2.0-py3-none-any.whl").write_bytes(
        (tmp_path / "beta-1.0-py3-none-any.whl").read_bytes())
    problems = gpu_packages.check(tmp_path)
    assert any(p.startswith("beta: 2 wheels") for p in problems)
    assert any("gamma needs not-on-the-machine" in p for p in problems)


@pytest.mark.skipif(not (REPO_ROOT / ".whl").is_dir(), reason="run scripts/gpu_wheels.sh first")
def test_downloaded_wheels_close_over_their_requirements():
    assert gpu_packages.check(REPO_ROOT / ".whl") == []
