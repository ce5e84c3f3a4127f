"""The main job (`launch/local.py`) end to end in fast mode, killed and resumed, and losing a
task worker mid-run. Each run is a real subprocess with the real sandboxed fleet."""

from __future__ import annotations

import json
import os
import pathlib
import signal
import subprocess
import sys
import time

import psutil
import pytest

from agentrl_jax.controller.task_keys import task_key
from agentrl_jax.experiment.job import GAME_STAGE_DIR
from agentrl_jax.experiment.run_report import EVALUATIONS
from environments.registry import AGENTBENCH_FC

REPO_ROOT = pathlib.Path(__file__).resolve().parents[2]
STAGES = ["demos", "sft", "eval_before", "rl", "eval_after", "report"]


def command(run_dir: pathlib.Path, sft_cache: pathlib.Path, *overrides: str) -> list[str]:
    return [sys.executable, "-m", "launch.local", "--config=configs/local_default.py:fast",
            f"--config.run_dir={run_dir}", f"--config.sft.cache_dir={sft_cache}", *overrides]


def env() -> dict[str, str]:
    out = dict(os.environ)
    out.pop("XLA_FLAGS", None)   # the launcher sees this machine's one CPU device
    return out


def run_to_end(argv: list[str], log: pathlib.Path) -> None:
    with open(log, "ab") as out:
        done = subprocess.run(argv, cwd=REPO_ROOT, env=env(), stdout=out, stderr=subprocess.STDOUT,
                              timeout=1500)
    assert done.returncode == 0, log.read_text()[-4000:]


def rl_records(run_dir: pathlib.Path) -> list[dict]:
    path = run_dir / "metrics.jsonl"
    if not path.exists():
        return []
    records = []
    for line in path.read_text().splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:   # a line being written
            continue
        if record["stage"] == "rl":
            records.append(record)
    return records


def wait_for_rl_step(process: subprocess.Popen, run_dir: pathlib.Path, step: int,
                     log: pathlib.Path) -> None:
    while not any(r["step"] >= step for r in rl_records(run_dir)):
        assert process.poll() is None, log.read_text()[-4000:]
        time.sleep(0.5)


def fleet_pids(run_dir: pathlib.Path) -> list[int]:
    fleet = json.loads((run_dir / "fleet.json").read_text())
    return [fleet["controller"]["pid"], *(w["pid"] for w in fleet["workers"])]


def assert_gone(pids: list[int]) -> None:
    """None of `pids` (nor their sandboxed children) is still running after a short grace."""
    deadline = time.monotonic() + 30
    alive = pids
    while alive and time.monotonic() < deadline:
        alive = [p for p in pids if psutil.pid_exists(p)
                 and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]
        time.sleep(0.2)
    assert not alive, f"orphans left: {alive}"


@pytest.fixture(scope="module")
def sft_cache(tmp_path_factory) -> pathlib.Path:
    """One warm-start cache for the module: the first run trains it, later runs reuse it."""
    return tmp_path_factory.mktemp("sft_cache")


def test_fast_mode_killed_and_rerun_resumes_and_produces_every_stage_output(tmp_path, sft_cache):
    """One run of the fast mode, SIGKILLed during RL and rerun with the same command: it
    resumes from its checkpoint without training a group twice, and every stage's outputs are
    there at the end (one test, as both halves are the cost of a whole run)."""
    run_dir, log = tmp_path / "run", tmp_path / "log.txt"
    argv = command(run_dir, sft_cache, "--config.rl.pipeline.steps=5",
                   "--config.eval.validate=True")
    with open(log, "ab") as out:
        process = subprocess.Popen(argv, cwd=REPO_ROOT, env=env(), stdout=out,
                                   stderr=subprocess.STDOUT)
    try:
        wait_for_rl_step(process, run_dir, 2, log)
    finally:
        process.kill()   # SIGKILL: no cleanup code of ours runs
        process.wait()
    assert_gone(fleet_pids(run_dir))   # workers die with the launcher (PDEATHSIG)
    killed_at = max(r["step"] for r in rl_records(run_dir))
    assert killed_at < 5

    run_to_end(argv, log)
    stages = json.loads((run_dir / "stages.json").read_text())
    assert list(stages) == STAGES
    assert stages["rl"]["resumed_from"] is not None and stages["rl"]["resumed_from"] >= 1
    records = rl_records(run_dir)
    assert [r["step"] for r in records] == [1, 2, 3, 4, 5]   # lost steps' records replaced
    trained = [g for r in records for g in r["groups_trained"]]
    assert len(trained) == len(set(trained)), "a group was trained twice"

    policy_dir = pathlib.Path(stages["sft"]["policy_dir"])
    assert policy_dir.parent == sft_cache and (policy_dir / "tokenizer.json").exists()
    for name in ("eval_before", "eval_after"):
        result = json.loads((run_dir / f"{name}.json").read_text())
        assert set(result["tasks"]) == {task_key(t, "test") for t in AGENTBENCH_FC}
        assert all(r["episodes"] == 1 for r in result["tasks"].values())
        assert (run_dir / f"{name}.md").read_text().startswith(f"### {name}")
        transcripts = [json.loads(x) for x in
                       (run_dir / f"{name}_episodes.jsonl").read_text().splitlines()]
        assert sorted(e["task"] for e in transcripts) == sorted(result["tasks"])
        assert all(e["messages"][0]["role"] == "system" for e in transcripts)
        calls = json.loads((run_dir / f"{name}_first_calls.json").read_text())
        assert set(calls) == set(AGENTBENCH_FC)
        assert all(r["episodes"] == 1 and 0 <= r["oracle_first_tool"] <= r["well_formed"] <= 1
                   for r in calls.values())
    for name in ("validation_before", "validation_after"):
        result = json.loads((run_dir / f"{name}.json").read_text())
        assert set(result["tasks"]) == {task_key(t, "train") for t in AGENTBENCH_FC}
    assert not list(run_dir.glob("*_journal.jsonl"))   # gone once each evaluation is written
    results = (run_dir / "results.md").read_text()
    assert "| **average** |" in results and "Validation slice before and after RL" in results
    paired = json.loads((run_dir / "validation_paired_difference.json").read_text())
    assert set(paired["tasks"]) == set(AGENTBENCH_FC)
    assert "groups kept" in log.read_text()   # RL's progress within a step
    assert "First calls and copying, eval after" in (run_dir / "results.md").read_text()
    assert (run_dir / "success.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    everything = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert {r["stage"] for r in everything} == {"sft", "rl", "rl_probe", *EVALUATIONS}
    assert {r["step"] for r in everything if r["stage"].endswith("_after")} == {5}
    probes = json.loads((run_dir / "copy_probe.json").read_text())
    assert "warm_start" in probes and "rl_step_5" in probes
    assert all(0 < p["copy_probe_nll"] < 3 * p["copy_probe_ln_v"] for p in probes.values())
    assert "Copy probe" in (run_dir / "results.md").read_text()
    assert list((run_dir / "tensorboard").glob("events.out.tfevents.*"))
    assert (run_dir / "final_model" / "config.json").exists()
    assert (run_dir / "checkpoints" / "5").is_dir()
    assert_gone(fleet_pids(run_dir))   # the fleet stopped with the job

    game = run_dir / GAME_STAGE_DIR   # then the tic-tac-toe stage, a job of its own
    game_stages = json.loads((game / "stages.json").read_text())
    assert list(game_stages) == [*STAGES[:4], "select", *STAGES[4:]]   # its policy chosen
    assert game_stages["select"]["step"] == 2   # on validation, among its checkpoints: 2 steps
    assert set(game_stages["select"]["validation_success"]) == {"2"}
    assert (game / "validation_step_2.json").exists()
    assert "Final policy: the RL checkpoint of step 2" in (game / "results.md").read_text()
    assert pathlib.Path(game_stages["sft"]["policy_dir"]).parent == sft_cache
    for name in ("eval_before", "eval_after"):
        result = json.loads((game / f"{name}.json").read_text())
        assert set(result["tasks"]) == {task_key("tictactoe", "test")}
    assert set(json.loads((game / "paired_difference.json").read_text())["tasks"]) == {
        "tictactoe"}
    assert (game / "success.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert_gone(fleet_pids(game))


@pytest.mark.slow   # ~120 s; a worker's death mid-session: tests/controller/test_controller_faults
def test_a_killed_task_worker_does_not_stop_training(tmp_path, sft_cache):
    run_dir, log = tmp_path / "run", tmp_path / "log.txt"
    argv = command(run_dir, sft_cache, "--config.rl.pipeline.steps=4",
                   "--config.eval.before_rl=False", "--config.game_stage=False")
    with open(log, "ab") as out:
        process = subprocess.Popen(argv, cwd=REPO_ROOT, env=env(), stdout=out,
                                   stderr=subprocess.STDOUT)
    try:
        wait_for_rl_step(process, run_dir, 1, log)
        fleet = json.loads((run_dir / "fleet.json").read_text())
        victim = next(w for w in fleet["workers"] if "split=train" in w["argv"]
                      and "db" in w["argv"])
        os.kill(victim["pid"], signal.SIGKILL)
        assert process.wait(timeout=1500) == 0, log.read_text()[-4000:]
    finally:
        if process.poll() is None:
            process.kill()
    assert [r["step"] for r in rl_records(run_dir)] == [1, 2, 3, 4]
    assert "report" in json.loads((run_dir / "stages.json").read_text())
