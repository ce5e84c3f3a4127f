"""The main job on a TPU pod (or any multi-host JAX cluster): RL against an environment fleet.

    python -m launch.tpu_pod --config=configs/agentbench_fc/qwen25_7b.py \\
        --config.model.path=/models/Qwen2.5-7B-Instruct \\
        --config.env.controller_url=http://10.0.0.2:5020/api \\
        --config.run_dir=gs://my-bucket/agentrl/qwen25_7b \\
        [--config.rl.trainer.optimizer.learning_rate=2e-6 ...]

Run the same command on every host of the slice (e.g. `gcloud compute tpus tpu-vm ssh NAME
--worker=all --command=...`). On a Cloud TPU VM the processes find each other by themselves;
elsewhere pass `--coordinator_address=HOST:PORT --num_processes=N --process_id=I` (process 0's
host and any free port). On one machine, without these flags, the run is one process.

Steps, on every process unless marked:
  1. `jax.distributed.initialize` (multi-host; before any JAX computation)
  2. meshes: the sampler mesh, `mesh.sampler_devices` of process 0's local devices (tensor
     parallel), and the trainer mesh, every other device (`mesh.trainer`: data × fsdp × tensor)
  3. the policy from the HF directory `model.path`, sharded onto the trainer mesh (and, when the
     loss has a KL term, a frozen bf16 reference beside it); process 0 loads a second copy
     onto its sampler mesh
  4. RL through the controller at `env.controller_url` (required; an AgentRL controller or
     `launch.env_fleet`), checkpointed to `run_dir/checkpoints` (a local path or a bucket URL;
     on several hosts it must be storage every host reaches); a restarted run resumes there
  5. process 0: evaluation on the test split (`eval.after_rl`; `eval.before_rl` too)
  6. process 0: the trained policy exported as an HF directory (`export.dir`, default
     `run_dir/final_model`)

How the processes divide the work (process 0 leads: rollouts, sampling, the pipeline; every
process trains, SPMD) is described in `agentrl_jax/pipeline/multihost.py`. Metrics, eval
results and TensorBoard go to `log_dir` (default: `run_dir` when it is local); with a bucket
`run_dir` they are written locally and copied to `run_dir/logs` at the end.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import logging
import os
import pathlib
import shutil
import sys
from typing import Any

import jax
import jax.numpy as jnp
import ml_collections
from absl import app, flags
from absl import logging as absl_logging
from jax.sharding import Mesh
from ml_collections import config_flags

from agentrl_jax.controller.client import ControllerClient
from agentrl_jax.evaluation import agentbench, protocol
from agentrl_jax.experiment import policy as policy_lib
from agentrl_jax.experiment import rl_stage
from agentrl_jax.experiment.metrics import MetricsLog
from agentrl_jax.models.decoder import Decoder
from agentrl_jax.models.hf_io import load_hf, save_hf
from agentrl_jax.parallel.mesh import make_mesh
from agentrl_jax.pipeline import multihost
from agentrl_jax.pipeline.trainer_driver import MultiHostDriver, TrainerDriver
from agentrl_jax.rl.train_step import TrainState
from environments.registry import task_key

log = logging.getLogger("launch.tpu_pod")
FLAGS = flags.FLAGS


def define_flags() -> None:
    """The launcher's flags (defined on demand, so importing this module defines none)."""
    config_flags.DEFINE_config_file("config", None, "run configuration (a configs/ file)",
                                    lock_config=True)
    flags.mark_flag_as_required("config")
    flags.DEFINE_string("coordinator_address", None,
                        "multi-host: process 0's HOST:PORT (auto-detected on Cloud TPU)")
    flags.DEFINE_integer("num_processes", None, "multi-host: how many processes")
    flags.DEFINE_integer("process_id", None, "multi-host: this process's index")
    flags.DEFINE_integer("heartbeat_timeout_s", multihost.HEARTBEAT_TIMEOUT_S,
                         "multi-host: seconds after which a silent process counts as dead and "
                         "the others end")


# ----------------------------------------------------------------------------- config


def is_url(path: str) -> bool:
    return "://" in path


def check_config(config: ml_collections.ConfigDict) -> None:
    """Refuses a config this launcher cannot run, with what to set (before anything starts)."""
    if not config.env.controller_url:
        raise ValueError("env.controller_url is empty: this launcher trains against an existing "
                         "environment fleet; pass --config.env.controller_url=http://HOST:5020/api"
                         " (start one with `python -m launch.env_fleet`)")
    if config.model.source == "scratch":
        raise ValueError("model.source='scratch' needs a warm start on demonstrations: use "
                         "launch.local, or model.source='hf' with model.path")
    if config.model.source == "hf" and not config.model.path:
        raise ValueError("model.path is empty: pass --config.model.path=/path/to/the/HF/model "
                         "(a directory with config.json, safetensors and the tokenizer)")
    if not config.env.tasks:
        raise ValueError("env.tasks is empty")
    if not config.run_dir:
        raise ValueError("run_dir is empty")
    if int(config.mesh.sampler_devices) < 1:
        raise ValueError("mesh.sampler_devices must be at least 1")
    if config.rl.pipeline.mode != "async" and config.rl.pipeline.mode != "sync":
        raise ValueError(f"rl.pipeline.mode must be async or sync, not {config.rl.pipeline.mode}")


def log_dir_of(config: ml_collections.ConfigDict) -> pathlib.Path:
    """Where metrics and eval results are written (always a local directory)."""
    if config.log_dir:
        return pathlib.Path(config.log_dir)
    if is_url(config.run_dir):
        return pathlib.Path("runs") / config.run_dir.rstrip("/").rsplit("/", 1)[-1]
    return pathlib.Path(config.run_dir)


# ----------------------------------------------------------------------------- meshes


@dataclasses.dataclass
class Layout:
    trainer: Mesh  # global: every process holds some of its devices
    sampler: Mesh | None  # process-local to process 0; None on the others


def build_layout(mesh_config: ml_collections.ConfigDict) -> Layout:
    """Splits the devices: the sampler takes the first `sampler_devices` of process 0's own
    devices, the trainer every other device of every process."""
    leader_devices = [d for d in jax.devices() if d.process_index == multihost.LEADER]
    n = int(mesh_config.sampler_devices)
    if not 0 < n < len(leader_devices):
        raise ValueError(
            f"mesh.sampler_devices={n}: process 0 has {len(leader_devices)} devices and must "
            "keep at least one for the trainer (it takes part in every train step)")
    sampler_devices = leader_devices[:n]
    trainer_devices = [d for d in jax.devices() if d not in sampler_devices]
    t = mesh_config.trainer
    trainer = make_mesh(data=t.data, fsdp=t.fsdp, tensor=t.tensor, devices=trainer_devices)
    sampler = None
    if multihost.is_leader():
        sampler = make_mesh(data=1, fsdp=1, tensor=n, devices=sampler_devices)
    return Layout(trainer=trainer, sampler=sampler)


def _dtype(name: str | None) -> Any:
    return jnp.dtype(name) if name else None


def load_trainer_models(config: ml_collections.ConfigDict, policy_dir: pathlib.Path,
                        mesh: Mesh) -> tuple[Decoder, Decoder | None]:
    """The policy on the trainer mesh (fp32 master weights) and the KL reference (bf16)."""
    model = load_hf(policy_dir, mesh=mesh)
    reference = None
    # With LoRA the trainer's frozen base is the KL reference: no second copy.
    if config.rl.trainer.loss.kl_coef and not config.rl.trainer.lora.enabled:
        reference = load_hf(policy_dir, mesh=mesh, dtype=jnp.bfloat16,
                            param_dtype=jnp.bfloat16)
    return model, reference


# ----------------------------------------------------------------------------- the leader


async def evaluate(config: ml_collections.ConfigDict, policy: policy_lib.Policy, engine,
                   client: ControllerClient, name: str, log_dir: pathlib.Path,
                   metrics: MetricsLog, step: int) -> dict[str, Any]:
    """The test split of `eval.tasks` (process 0; the sampler already serves `policy`)."""
    results = await agentbench.evaluate(
        client, engine, rl_stage.agent_spec(config.rl, policy),
        [task_key(task, config.env.test_split) for task in config.eval.tasks],
        select=protocol.selection("test", config.eval.per_task), runs=config.eval.runs,
        concurrency=config.eval.concurrency, seed=config.seed)
    print(agentbench.write(results, log_dir, name), flush=True)
    metrics.write(name, step, {**agentbench.average(results),
                               **{f"{t}/success": r.success_mean for t, r in results.items()}})
    return agentbench.to_json(results)


def export(config: ml_collections.ConfigDict, policy: policy_lib.Policy,
           log_dir: pathlib.Path) -> str:
    """The trained policy as an HF directory (written locally, then copied to a bucket)."""
    target = config.export.dir or os.path.join(config.run_dir, "final_model")
    local = log_dir / "final_model" if is_url(target) else pathlib.Path(target)
    shutil.rmtree(local, ignore_errors=True)
    save_hf(policy.model, local, dtype=_dtype(config.export.dtype))
    policy.tokenizer.save_pretrained(local)
    if is_url(target):
        copy_files(local, target)
    return target


def copy_files(local: pathlib.Path, url: str) -> None:
    """The plain files of `local` (not its subdirectories) into the bucket folder `url`."""
    from etils import epath

    destination = epath.Path(url)
    destination.mkdir(parents=True, exist_ok=True)
    for path in sorted(local.iterdir()):
        if path.is_file():
            (destination / path.name).write_bytes(path.read_bytes())


async def lead(config: ml_collections.ConfigDict, layout: Layout, policy_dir: pathlib.Path,
               model: Decoder, reference: Decoder | None,
               make_driver: rl_stage.DriverFactory) -> rl_stage.RLResult:
    """Process 0: sampler, controller, the RL pipeline, evaluation and export."""
    log_dir = log_dir_of(config)
    log_dir.mkdir(parents=True, exist_ok=True)
    (log_dir / "config.json").write_text(config.to_json(indent=1, sort_keys=True))
    metrics = MetricsLog(log_dir)
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(policy_dir)
    policy = policy_lib.Policy(model, tokenizer, config.model.parser)
    # The sampler's own copy, on its own devices: parameters as the trainer's (so weight
    # updates keep shapes and dtypes, hence compile nothing), compute in `model.dtype`.
    sampler_model = load_hf(policy_dir, mesh=layout.sampler,
                            **({"dtype": _dtype(config.model.dtype)} if config.model.dtype else {}))
    sampler_policy = policy_lib.Policy(sampler_model, tokenizer, config.model.parser)
    try:
        with rl_stage.make_engine(config.rl, sampler_policy, mesh=layout.sampler) as engine:
            async with ControllerClient(config.env.controller_url) as client:
                if config.eval.before_rl:
                    await evaluate(config, policy, engine, client, "eval_before", log_dir,
                                   metrics, 0)
                tasks = {}
                for task in config.env.tasks:
                    name = task_key(task, config.env.train_split)
                    tasks[name] = await client.get_indices(name)

                def on_step(report) -> None:
                    values = report.metrics
                    print(f"step {report.step}/{config.rl.pipeline.steps}: reward "
                          f"{values.get('reward_mean', 0):.3f} success "
                          f"{values.get('success', 0):.3f} grad_norm "
                          f"{values.get('grad_norm', float('nan')):.3g}", flush=True)

                result = await rl_stage.run_rl(
                    config.rl, policy=policy, engine=engine, trainer_mesh=layout.trainer,
                    client=client, task_indices=tasks, run_dir=config.run_dir,
                    metrics=metrics, on_step=on_step, reference=reference,
                    make_driver=make_driver)
                if config.eval.after_rl:
                    await evaluate(config, policy, engine, client, "eval_after", log_dir,
                                   metrics, config.rl.pipeline.steps)
        target = export(config, policy, log_dir)
        print(f"trained policy: {target}", flush=True)
    finally:
        metrics.close()
    if is_url(config.run_dir):
        copy_files(log_dir, os.path.join(config.run_dir, "logs"))
    return result


# ----------------------------------------------------------------------------- the job


def run(config: ml_collections.ConfigDict) -> TrainState:
    """Runs this process's part of the job (after `multihost.initialize`); returns its final
    train state (on several processes, each holds its own shards)."""
    check_config(config)
    layout = build_layout(config.mesh)
    policy_dir = policy_lib.pretrained_dir(config.model)
    model, reference = load_trainer_models(config, policy_dir, layout.trainer)
    make_driver: rl_stage.DriverFactory = TrainerDriver
    if jax.process_count() > 1:
        channel = multihost.Channel(layout.trainer.devices.flat)
        make_driver = functools.partial(MultiHostDriver, channel=channel)
    if not multihost.is_leader():
        return rl_stage.follow_rl(config.rl, model=model, trainer_mesh=layout.trainer,
                                  run_dir=config.run_dir, make_driver=make_driver,
                                  reference=reference)
    result = asyncio.run(lead(config, layout, policy_dir, model, reference, make_driver))
    result.driver.done()  # the followers return (they waited for evaluation and export)
    return result.state


def start(argv: list[str]) -> ml_collections.ConfigDict:
    """Flags → the checked config, with the processes joined (what `main` runs before `run`)."""
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    absl_logging.set_verbosity(absl_logging.WARNING)
    logging.getLogger("httpx").setLevel(logging.WARNING)  # a line per request otherwise
    config = FLAGS.config
    check_config(config)  # before joining the others: a bad config fails fast everywhere
    multihost.initialize(FLAGS.coordinator_address, FLAGS.num_processes, FLAGS.process_id,
                         heartbeat_timeout_s=FLAGS.heartbeat_timeout_s)
    return config


def main(argv: list[str]) -> None:
    run(start(argv))


if __name__ == "__main__":
    define_flags()
    app.run(main)
