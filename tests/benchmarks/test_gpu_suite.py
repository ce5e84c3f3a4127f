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


def hang(options) -> None:
    time.sleep(3600)


def env() -> dict[str, str]:
    out = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    out.pop("XLA_FLAGS", None)   # the suite sees this machine's one CPU device
    return out


def test_tiny_suite_reports_every_key(tmp_path):
    out = tmp_path / "gpu_suite.json"
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.gpu_suite", "--tiny", "--out", str(out),
         "--work_dir", str(tmp_path / "work")],
        cwd=REPO_ROOT, env=env(), capture_output=True, text=True, timeout=1200)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    figures = json.loads(out.read_text())

    measured = [k for p in gpu_suite.PARTS if p.name != "extras" for k in p.keys]
    missing = [k for k in (*measured, *gpu_suite.DERIVED) if figures.get(k) is None]
    assert not missing, {k: v for k, v in figures.items() if k.startswith(("error_", "skip"))}
    assert not [k for k in figures if k.startswith(("error_", "skipped_"))
                and not k.endswith(("_prefix", "_lora"))]
    for key in (*gpu_suite.PARTS[-1].keys, "hbm_copy_gbps", "jax", "machine"):
        assert key in figures   # extras' keys are there, null until their modules land
    assert figures["smollm2_learn_exit"] == 0 and figures["tiny"] is True
    assert all(0 <= figures[f"smollm2_success_{w}"] <= 1 for w in ("before", "after"))
    assert all(figures[f"smollm2_{s}_s"] > 0 for s in gpu_suite.LEARN_STAGES)
    assert figures["smollm2_135m_decode_tok_s_b256"] > 0
    assert figures["qwen25_1_5b_mfu_vs_matmul_peak"] == pytest.approx(
        figures["qwen25_1_5b_train_model_tflops"] / figures["matmul_bf16_tflops"])


def test_a_failing_part_loses_only_its_own_figures(tmp_path):
    peaks = gpu_suite.PARTS[0]
    broken = gpu_suite.Part("broken", "benchmarks.gpu_suite:no_such_part", ("broken_figure",),
                            1, 1)
    crashing = gpu_suite.Part("crashing", f"{THIS_MODULE}:crash", ("crashing_figure",), 1, 1)
    options = gpu_suite.Options(tiny=True, work_dir=str(tmp_path))
    figures = gpu_suite.run_suite([broken, crashing, peaks], budget_s=600, options=options)

    assert figures["broken_figure"] is None and "no_such_part" in figures["error_broken"]
    assert figures["crashing_figure"] is None
    assert "exited with 3 and wrote nothing" in figures["error_crashing"]
    assert figures["hbm_copy_gbps"] > 0 and figures["matmul_bf16_tflops"] > 0
    assert "error_peaks" not in figures


def test_a_part_over_the_budget_is_skipped_with_the_reason(tmp_path):
    big = gpu_suite.Part("big", "benchmarks.gpu_suite:part_peaks", ("hbm_copy_gbps",), 10, 500)
    figures = gpu_suite.run_suite([big], budget_s=60,
                                  options=gpu_suite.Options(tiny=True, work_dir=str(tmp_path)))
    assert figures["hbm_copy_gbps"] is None
    assert figures["skipped_big"] == "needs ~500 s, 60 s left of the 60 s budget"
    assert "part_seconds_big" not in figures


def test_a_part_past_the_budget_is_killed(tmp_path, monkeypatch):
    monkeypatch.setattr(gpu_suite, "KILL_GRACE_S", 1.0)
    slow = gpu_suite.Part("slow", f"{THIS_MODULE}:hang", ("slow_figure",), 0, 0)
    figures = gpu_suite.run_suite([slow], budget_s=2,
                                  options=gpu_suite.Options(tiny=True, work_dir=str(tmp_path)))
    assert figures["slow_figure"] is None and "killed at the budget" in figures["error_slow"]


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
    from agentrl_jax.experiment import rl_stage
    from agentrl_jax.sampling import EngineConfig
    from configs import local_smollm2

    c = local_smollm2.get_config("gpu")
    assert tuple(c.env.tasks) == local_smollm2.GPU_TASKS and c.eval.per_task == 20
    rl_stage.check_context_fits_training(c.rl)
    EngineConfig(**{k: tuple(v) if isinstance(v, list) else v
                    for k, v in c.rl.engine.to_dict().items()})
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
