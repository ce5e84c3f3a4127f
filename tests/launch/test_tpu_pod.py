"""The multi-host path of `launch.tpu_pod`: CPU processes joined by `jax.distributed` on
localhost run a few steps of the real pipeline against a real controller and task workers:
two of 3 devices, process 0 with two sampler replicas, process 1 training only; slow: two of 3
devices, process 1 with two replicas; three of 3 devices, each sampling on one, one killed and
the run resumed; LoRA over two processes that both sample."""

import json
import os
import pathlib
import signal
import socket
import subprocess
import sys
import time
import zlib

import jax
import numpy as np
import pytest
from flax import nnx

from agentrl_jax.episode import SampleStatus
from agentrl_jax.experiment.policy import Policy, save_policy
from agentrl_jax.models.config import ModelConfig
from agentrl_jax.models.decoder import Decoder
from agentrl_jax.models.hf_io import load_hf
from environments.echo import ECHO_TOOL
from environments.worker.task import EpisodeResult, Task
from tests.launch.pod_driver import path_key

REPO = pathlib.Path(__file__).resolve().parents[2]
STEPS = 2


class CoinTask(Task):
    """One turn; the reward is a hash of the reply, so a group's members differ (GRPO has
    something to learn from even with a random model) and the run is deterministic."""

    tools = [ECHO_TOOL]
    concurrency = 32

    def __init__(self, name: str):
        self.name = name

    def indices(self):
        return list(range(20))

    async def episode(self, index, session) -> EpisodeResult:
        session.inject({"role": "user", "content": f"Say something about {index}."})
        turn = await session.action()
        reward = zlib.crc32(turn.content.encode()) % 1000 / 1000
        return EpisodeResult(SampleStatus.COMPLETED, reward=reward)


@pytest.fixture
def coin_fleet():
    from tests.support.controller_fleet import ThreadFleet

    fleet = ThreadFleet()
    fleet.add_worker(CoinTask("coin-train"), concurrency=32)
    fleet.add_worker(CoinTask("coin-test"), concurrency=32)
    yield fleet
    fleet.close()


def tiny_model_dir(tokenizer, directory: pathlib.Path, seed: int = 0) -> pathlib.Path:
    # hidden 48 and MLP 96 split evenly over 3, 4 or 6 trainer devices (fsdp).
    cfg = ModelConfig.tiny("llama", vocab_size=len(tokenizer), hidden_size=48,
                           intermediate_size=96, num_layers=1, num_heads=2, num_kv_heads=1,
                           head_dim=24, max_position_embeddings=1024,
                           eos_token_id=tokenizer.eos_token_id)
    return save_policy(Policy(Decoder(cfg, rngs=nnx.Rngs(seed)), tokenizer, "hermes"), directory)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def flat_params(model_dir: pathlib.Path) -> dict[str, np.ndarray]:
    state = nnx.to_pure_dict(nnx.split(load_hf(model_dir))[1])
    return {path_key(p): np.asarray(v) for p, v in jax.tree_util.tree_flatten_with_path(state)[0]}


def launch_pod(tmp_path: pathlib.Path, model_dir: pathlib.Path, run_dir: pathlib.Path,
               controller_url: str, processes: int, devices: int, *overrides: str,
               tag: str = "") -> list[tuple[subprocess.Popen, object]]:
    """`processes` processes of `tests.launch.pod_driver` joined on localhost, `devices` CPU
    devices each; logs in tmp_path/process{tag}{pid}.log, shards in shards{tag}{pid}.npz."""
    port = free_port()
    env = {**os.environ, "JAX_PLATFORMS": "cpu",
           "XLA_FLAGS": f"--xla_force_host_platform_device_count={devices}"}
    procs = []
    for pid in range(processes):
        argv = [sys.executable, "-m", "tests.launch.pod_driver",
                "--config=tests/launch/tiny_pod_config.py",
                f"--config.model.path={model_dir}",
                f"--config.env.controller_url={controller_url}",
                f"--config.run_dir={run_dir}",
                f"--coordinator_address=127.0.0.1:{port}", f"--num_processes={processes}",
                f"--process_id={pid}", f"--shards_out={tmp_path / f'shards{tag}{pid}.npz'}",
                *overrides]
        log = open(tmp_path / f"process{tag}{pid}.log", "w")
        procs.append((subprocess.Popen(argv, cwd=REPO, env=env, stdout=log,
                                       stderr=subprocess.STDOUT), log))
    return procs


def wait_all(procs, timeout: float) -> list[int]:
    """Exit codes; the bound only keeps a broken build from hanging the suite."""
    try:
        return [p.wait(timeout=timeout) for p, _ in procs]
    finally:
        for p, log in procs:
            if p.poll() is None:
                p.kill()
            log.close()


def test_two_processes_train_together(tokenizer, coin_fleet, tmp_path):
    """2 processes × 3 CPU devices: process 0 runs two sampler replicas of one device each (the
    pipeline's engine, and a host sampler fed from its driver through host memory) and trains
    on its third device; process 1 only trains (`sampler_devices_by_process=(2, 0)`)."""
    model_dir = tiny_model_dir(tokenizer, tmp_path / "model")
    run_dir = tmp_path / "run"
    overrides = ("--config.mesh.sampler_devices_by_process=(2, 0)",
                 "--config.mesh.sampler_tensor_parallel=1", "--config.mesh.hub_host=127.0.0.1")
    codes = wait_all(launch_pod(tmp_path, model_dir, run_dir, coin_fleet.url, 2, 3, *overrides),
                     1200)
    logs = [(tmp_path / f"process{pid}.log").read_text() for pid in range(2)]
    assert codes == [0, 0], "\n\n".join(log[-6000:] for log in logs)

    # The leader trained STEPS steps on rollouts from the controller; from step 2 on, the
    # tokens came from weights gathered across both processes onto process 0's samplers.
    records = check_lockstep_records(run_dir)
    hub = json.loads((run_dir / "rollout_hub.json").read_text())
    assert set(hub) == {"process0-1"}, hub   # the leader's second replica; its first is in process
    check_every_version_verified(hub, STEPS)
    assert any(r["stage"] == "eval_after" for r in records)
    # Every process made every checkpoint save: the last one is complete.
    assert (run_dir / "checkpoints" / str(STEPS) / "commit_success.txt").exists()

    # Both processes' shards are slices of one model: the one the leader gathered and exported.
    final = flat_params(run_dir / "final_model")
    initial = flat_params(model_dir)
    assert any(not np.array_equal(final[k], initial[k]) for k in final)  # it trained
    for pid in range(2):
        check_shards_are_slices_of(final, tmp_path / f"shards{pid}.npz")
    # Process 1 holds every parameter (its three devices are three quarters of the trainer mesh).
    with np.load(tmp_path / "shards1.npz") as shards:
        assert {n.split("|")[0] for n in shards.files} == set(final)


@pytest.mark.slow  # ~150 s: two processes, three sampler replicas, on 2 cores
def test_every_process_samples_with_the_trainers_weights(tokenizer, coin_fleet, tmp_path):
    """2 processes × 3 CPU devices: process 0 samples on one (the pipeline's engine) and trains
    on two; process 1 runs two sampler replicas of one device each and trains on its third.
    Process 1's replicas claim groups from the leader's rollout hub and install the weights
    that one gather with the trainer places on both of them, device to device. Trained groups
    come from both processes' samplers, every version each replica served is, by checksum,
    the one the trainer published, and (lockstep) the trainer's log-probs reproduce every
    sampler's behaviour log-probs."""
    model_dir = tiny_model_dir(tokenizer, tmp_path / "model")
    run_dir = tmp_path / "run"
    # The leader's one in-process rollout worker and the follower's samplers share each step's
    # 4 groups (lockstep: all 4 are admitted together once the step's weights are served).
    overrides = ("--config.mesh.sampler_devices_per_host=2",
                 "--config.mesh.sampler_tensor_parallel=1", "--config.mesh.hub_host=127.0.0.1",
                 "--config.eval.after_rl=False", "--config.rl.pipeline.groups_per_step=4",
                 "--config.rl.pipeline.rollout_workers=1")
    codes = wait_all(launch_pod(tmp_path, model_dir, run_dir, coin_fleet.url, 2, 3,
                                *overrides), 1200)
    logs = [(tmp_path / f"process{pid}.log").read_text() for pid in range(2)]
    assert codes == [0, 0], "\n\n".join(log[-6000:] for log in logs)

    rl = [r for r in check_lockstep_records(run_dir) if r["stage"] == "rl"]
    trained = {g for r in rl for g in r["groups_trained"]}
    hub = json.loads((run_dir / "rollout_hub.json").read_text())
    assert set(hub) == {"process1-0", "process1-1"}, hub  # the leader's sampler is in-process
    check_every_version_verified(hub, STEPS)
    follower = {g for record in hub.values() for g in record["groups"]}
    assert trained & follower, (trained, follower)
    assert trained - follower, "no trained group came from the leader's sampler"
    # What process 1 serves (each policy) is what the trainer published for that version: its
    # own gather of a trained step, placed on its sampler devices, has the same checksum.
    for record in hub.values():
        for policy in ("current", "stale"):
            served = record["serving"][policy]
            assert served["version"] >= 1 and served["checksum"] == served["published"], served
    # Both processes' shards are slices of one model: the one the leader gathered and exported.
    final = flat_params(run_dir / "final_model")
    for pid in range(2):
        check_shards_are_slices_of(final, tmp_path / f"shards{pid}.npz")


def check_every_version_verified(hub: dict, steps: int, first: int = 0) -> None:
    """Every host sampler served each weight version the steps first..steps-1 sampled from,
    each under the checksum the trainer published for it, and nothing under another."""
    assert hub, "no host sampler reported to the hub"
    for worker, record in hub.items():
        assert not record["mismatched"] and not record["dropped"], (worker, record)
        runs = record["verified"]["current"]
        served = {v for start, end in runs for v in range(start, end + 1)}
        assert set(range(first, steps)) <= served, (worker, runs)


def check_shards_are_slices_of(final: dict[str, np.ndarray], shards_path: pathlib.Path) -> None:
    """A process's shards of the final parameters equal the slices of the exported model."""
    with np.load(shards_path) as shards:
        names = [n for n in shards.files if not n.endswith("|bounds")]
        assert names, f"{shards_path.name}: the process holds no shard"
        for name in names:
            bounds = shards[name + "|bounds"]
            expected = final[name.split("|")[0]][tuple(slice(a, b) for a, b in bounds)]
            np.testing.assert_array_equal(shards[name], expected, err_msg=name)


@pytest.mark.slow
def test_a_killed_process_ends_the_run_and_a_rerun_resumes_exactly(tokenizer, coin_fleet,
                                                                    tmp_path):
    """3 processes × 3 CPU devices, each sampling on one and training on two (6 trainer
    devices). After the first checkpoint, kill -9 of process 2 ends the other two (heartbeat
    timeout, no hang); the same command again resumes from the last checkpoint: every step is
    recorded once, no group id is trained twice, trained groups came from the followers'
    samplers, each of which served every weight version under the trainer's checksum (each
    process's gather equals the leader's, step after step), and every process's shards are
    slices of one final model."""
    steps = 4
    model_dir = tiny_model_dir(tokenizer, tmp_path / "model")
    run_dir = tmp_path / "run"
    overrides = (f"--config.rl.pipeline.steps={steps}", "--config.eval.after_rl=False",
                 "--config.mesh.sampler_devices_per_host=1", "--config.mesh.hub_host=127.0.0.1",
                 "--config.rl.pipeline.groups_per_step=3", "--config.rl.pipeline.rollout_workers=1",
                 "--heartbeat_timeout_s=10")
    procs = launch_pod(tmp_path, model_dir, run_dir, coin_fleet.url, 3, 3, *overrides)
    first = run_dir / "checkpoints" / "1" / "commit_success.txt"
    deadline = time.monotonic() + 900   # only a guard against a broken build
    while not first.exists():
        assert all(p.poll() is None for p, _ in procs), (tmp_path / "process0.log").read_text()
        assert time.monotonic() < deadline, "no checkpoint"
        time.sleep(0.2)
    os.kill(procs[2][0].pid, signal.SIGKILL)
    codes = wait_all(procs, 600)
    assert codes[2] == -signal.SIGKILL
    assert codes[0] != 0 and codes[1] != 0, codes   # they ended, and did not finish the run
    saved = sorted(int(p.name) for p in (run_dir / "checkpoints").iterdir() if p.name.isdigit()
                   and (p / "commit_success.txt").exists())
    resumed_from = saved[-1]
    assert 1 <= resumed_from < steps

    codes = wait_all(launch_pod(tmp_path, model_dir, run_dir, coin_fleet.url, 3, 3, *overrides,
                                tag="b"), 1200)
    logs = [(tmp_path / f"processb{pid}.log").read_text() for pid in range(3)]
    assert codes == [0, 0, 0], "\n\n".join(log[-4000:] for log in logs)
    printed = [int(line.split()[1].split("/")[0]) for line in logs[0].splitlines()
               if line.startswith("step ")]
    assert printed == list(range(resumed_from + 1, steps + 1))   # resumed, not restarted
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    rl = [r for r in records if r["stage"] == "rl"]
    assert [r["step"] for r in rl] == list(range(1, steps + 1))
    trained = [g for r in rl for g in r["groups_trained"]]
    assert len(trained) == len(set(trained)) and len(trained) >= 3 * steps
    hub = json.loads((run_dir / "rollout_hub.json").read_text())   # the rerun's
    assert set(hub) == {"process1-0", "process2-0"}, hub
    check_every_version_verified(hub, steps, first=resumed_from)
    followers = {g for record in hub.values() for g in record["groups"]}
    assert set(trained) & followers, (trained, followers)
    final = flat_params(run_dir / "final_model")
    for pid in range(3):
        check_shards_are_slices_of(final, tmp_path / f"shardsb{pid}.npz")


def check_lockstep_records(run_dir: pathlib.Path) -> list[dict]:
    """The RL records; each step's tokens came from the trainer's weights of the step before."""
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    rl = [r for r in records if r["stage"] == "rl"]
    assert [r["step"] for r in rl] == list(range(1, STEPS + 1))
    for r in rl:
        assert r["num_rollouts"] >= 8 and np.isfinite(r["grad_norm"])
        # Lockstep (lag 0), and the trainer's log-probs reproduce the behaviour log-probs: the
        # sampler served exactly the weights the trainer had after the step before.
        assert r["lag_max"] == 0 and r["stale_refreshed"] == 1.0
        assert abs(r["ratio_max"] - 1) < 1e-3 and abs(r["ratio_min"] - 1) < 1e-3, r
    return records


LORA = ("--config.rl.trainer.lora.enabled=True", "--config.rl.trainer.lora.rank=4",
        "--config.eval.after_rl=False", "--config.mesh.sampler_devices_per_host=1",
        "--config.mesh.hub_host=127.0.0.1")


@pytest.mark.slow
def test_lora_over_two_processes_syncs_adapters_and_checks_the_base(tokenizer, coin_fleet,
                                                                     tmp_path):
    """LoRA on the two-process job (3 devices each, each process sampling on one): each weight
    update is the adapter tree alone, the leader's sampler and process 1's both serve every
    version under the trainer's checksum; the checkpoints name the base the adapters were
    trained over, the same fingerprint on every process (a resume on both processes compares
    it with their own); a resume over another base fails with `BaseMismatchError` on both,
    before training."""
    from agentrl_jax.checkpoint import CheckpointManager
    from agentrl_jax.parallel.mesh import make_mesh
    from agentrl_jax.rl.train_step import Trainer, with_trainer_adapters
    from agentrl_jax.sampling.adapter_engine import adapter_tree
    from agentrl_jax.sampling.weights import weights_of
    from tests.launch import tiny_pod_config

    model_dir = tiny_model_dir(tokenizer, tmp_path / "model")
    run_dir = tmp_path / "run"
    codes = wait_all(launch_pod(tmp_path, model_dir, run_dir, coin_fleet.url, 2, 3, *LORA), 1200)
    logs = [(tmp_path / f"process{pid}.log").read_text() for pid in range(2)]
    assert codes == [0, 0], "\n\n".join(log[-6000:] for log in logs)
    check_lockstep_records(run_dir)
    hub = json.loads((run_dir / "rollout_hub.json").read_text())
    assert set(hub) == {"process1-0"}, hub
    check_every_version_verified(hub, STEPS)

    # (1) Every update carried the adapters' bytes: rank-4 A and B of every projection.
    trainer_cfg = tiny_pod_config.get_config().rl.trainer
    trainer_cfg.lora.update(enabled=True, rank=4)
    base = load_hf(model_dir)
    adapter_bytes = sum(x.nbytes for x in jax.tree.leaves(
        adapter_tree(with_trainer_adapters(base, trainer_cfg))))
    full_bytes = sum(x.nbytes for x in jax.tree.leaves(weights_of(base)))
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    rl = [r for r in records if r["stage"] == "rl"]
    assert [r["sync_bytes"] for r in rl] == [adapter_bytes] * STEPS
    assert adapter_bytes < full_bytes / 4, (adapter_bytes, full_bytes)

    # (2) The checkpoint names the base: the fingerprint of the same base on one device here.
    mesh = make_mesh(data=1, fsdp=1, tensor=1, devices=jax.devices()[:1])
    expected = Trainer(base, trainer_cfg, mesh).base_fingerprint
    with CheckpointManager(run_dir / "checkpoints") as saved:
        assert saved.saved_base_fingerprint(STEPS) == expected
    # Both processes resume from it: each compares the stored fingerprint with its own.
    more = (f"--config.rl.pipeline.steps={STEPS + 1}",)
    codes = wait_all(launch_pod(tmp_path, model_dir, run_dir, coin_fleet.url, 2, 3, *LORA, *more,
                                tag="b"), 1200)
    logs = [(tmp_path / f"processb{pid}.log").read_text() for pid in range(2)]
    assert codes == [0, 0], "\n\n".join(log[-6000:] for log in logs)
    printed = [line.split()[1] for line in logs[0].splitlines() if line.startswith("step ")]
    assert printed == [f"{STEPS + 1}/{STEPS + 1}:"]   # resumed, not restarted
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["sync_bytes"] for r in records if r["stage"] == "rl"] == [adapter_bytes] * (STEPS + 1)

    # (3) Another base (same shapes, other weights): both processes refuse to resume.
    other_dir = tiny_model_dir(tokenizer, tmp_path / "other", seed=1)
    codes = wait_all(launch_pod(tmp_path, other_dir, run_dir, coin_fleet.url, 2, 3, *LORA,
                                f"--config.rl.pipeline.steps={STEPS + 2}", tag="c"), 600)
    logs = [(tmp_path / f"processc{pid}.log").read_text() for pid in range(2)]
    assert codes[0] != 0 and codes[1] != 0, codes
    for log in logs:
        assert "BaseMismatchError" in log and "not this run's base" in log, log[-4000:]
        assert not any(line.startswith("step ") for line in log.splitlines())


@pytest.mark.slow   # ~90 s; the default run keeps the launcher's multi-process run (above)
def test_one_process_runs_the_same_job(tokenizer, coin_fleet, tmp_path, capsys):
    """Without jax.distributed (one host): two sampler replicas on devices 0 and 1 (the
    pipeline's engine, and a host sampler fed by the local driver), the trainer on the other 6.
    The stages are the job's graph, marked in the run directory; a second start trains nothing
    and restores the trained weights, and a changed config (more steps) resumes RL."""
    from agentrl_jax.experiment import job, pod_job
    from agentrl_jax.experiment.deployment import REMOTE
    from tests.launch import tiny_pod_config

    config = tiny_pod_config.get_config()
    config.model.path = str(tiny_model_dir(tokenizer, tmp_path / "model"))
    config.env.controller_url = coin_fleet.url
    config.run_dir = str(tmp_path / "run")
    config.eval.after_rl = False
    config.mesh.update(sampler_devices=2, sampler_tensor_parallel=1, hub_host="127.0.0.1")

    def start(config):
        deployment = pod_job.PodDeployment(config)
        assert job.run_job(config, REMOTE, deployment) == (tmp_path / "run").resolve()
        return deployment.state, json.loads((tmp_path / "run" / "stages.json").read_text())

    state, stages = start(config)
    assert int(state.step) == STEPS
    assert list(stages) == ["rl", "export"]   # no warm start, no evaluation (eval.after_rl)
    assert stages["rl"]["resumed_from"] is None
    written = json.loads((tmp_path / "run" / "config.json").read_text())
    assert written["deployment"] == "pod" and written["rl"]["pipeline"]["steps"] == STEPS
    check_lockstep_records(tmp_path / "run")
    hub = json.loads((tmp_path / "run" / "rollout_hub.json").read_text())
    assert set(hub) == {"process0-1"}, hub
    check_every_version_verified(hub, STEPS)
    assert (tmp_path / "run" / "checkpoints" / str(STEPS) / "commit_success.txt").exists()
    final = flat_params(tmp_path / "run" / "final_model")
    for path, leaf in jax.tree_util.tree_flatten_with_path(state.params)[0]:
        np.testing.assert_array_equal(np.asarray(leaf), final[path_key(path)])

    capsys.readouterr()
    again, stages = start(config)   # the same command: RL resumes after its last step
    assert int(again.step) == STEPS and stages["rl"]["resumed_from"] == STEPS
    printed = capsys.readouterr().out.splitlines()
    assert not any(line.startswith("step ") for line in printed)   # trained nothing
    for path, leaf in jax.tree_util.tree_flatten_with_path(again.params)[0]:
        np.testing.assert_array_equal(np.asarray(leaf), final[path_key(path)])

    more = config.copy_and_resolve_references()
    more.rl.pipeline.steps = STEPS + 1
    more_state, stages = start(more)   # another config: the graph again over the checkpoints
    assert int(more_state.step) == STEPS + 1 and stages["rl"]["resumed_from"] == STEPS
    assert list(stages) == ["rl", "export"]


def test_bucket_run_dirs_reach_orbax_untouched(monkeypatch):
    """A gs:// run_dir must not be folded into a local path on the way to Orbax."""
    from etils import epath

    from agentrl_jax import checkpoint
    from agentrl_jax.experiment import rl_stage

    url = "gs://bucket/agentrl/run"
    assert rl_stage.checkpoint_dir(url) == url + "/checkpoints"
    assert checkpoint.resolve_directory(url + "/checkpoints") == url + "/checkpoints"
    assert checkpoint.resolve_directory("runs/x") == os.path.abspath("runs/x")
    seen = []

    class Recorder:
        def __init__(self, directory, **_):
            seen.append(directory)

    monkeypatch.setattr(checkpoint.ocp, "CheckpointManager", Recorder)
    checkpoint.CheckpointManager(rl_stage.checkpoint_dir(url))
    assert seen == [url + "/checkpoints"]
    assert str(epath.Path(seen[0]) / "1") == url + "/checkpoints/1"  # as Orbax joins steps
