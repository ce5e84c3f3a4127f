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
     parallel; on every other process `mesh.sampler_devices_per_host` of its own, default 0),
     and the trainer mesh, every other device (`mesh.trainer`: data × fsdp × tensor)
  3. the policy from the HF directory `model.path`, sharded onto the trainer mesh (and, when the
     loss has a KL term, a frozen bf16 reference beside it); each process with sampler devices
     loads a second copy onto them (a follower's sampler claims groups from process 0's rollout
     hub, whose URL process 0 sends first, and takes its weights from the trainer's gather:
     `pipeline.host_sampler`)
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
import json
import logging
import os
import pathlib
import shutil
import socket
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
from agentrl_jax.pipeline.host_sampler import HostSampler
from agentrl_jax.pipeline.rollout_hub import HubSettings, RolloutHub
from agentrl_jax.pipeline.sampling_worker import make_spec
from agentrl_jax.pipeline.trainer_driver import MultiHostDriver, TrainerDriver, onto
from agentrl_jax.rl.train_step import TrainState
from agentrl_jax.sampling import weights as weights_lib
from environments.registry import task_key

log = logging.getLogger("launch.tpu_pod")
SETUP = "setup"  # the leader's first message when the followers sample: the hub's URL
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
    if config.model.get("shrink_layers"):
        raise ValueError("model.shrink_layers shrinks a model over launch.local's "
                         "demonstrations; here, shrink it once (agentrl_jax.models.shrink) and "
                         "pass model.source='hf' with model.path")
    if config.model.source == "hf" and not config.model.path:
        raise ValueError("model.path is empty: pass --config.model.path=/path/to/the/HF/model "
                         "(a directory with config.json, safetensors and the tokenizer)")
    if not config.env.tasks:
        raise ValueError("env.tasks is empty")
    if not config.run_dir:
        raise ValueError("run_dir is empty")
    if int(config.mesh.sampler_devices) < 1:
        raise ValueError("mesh.sampler_devices must be at least 1")
    if int(config.mesh.sampler_devices_per_host) < 0:
        raise ValueError("mesh.sampler_devices_per_host must be 0 or more")
    if config.mesh.weight_transfer not in ("device", "host"):
        raise ValueError(f"mesh.weight_transfer must be device or host, not "
                         f"{config.mesh.weight_transfer!r}")
    if int(config.mesh.sampler_devices_per_host) and config.rl.trainer.lora.enabled:
        raise ValueError("mesh.sampler_devices_per_host > 0 takes full weights: not with LoRA "
                         "yet (set it to 0)")
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
    sampler: Mesh | None  # this process's own sampler devices; None where it has none


def sampler_count(mesh_config: ml_collections.ConfigDict, process: int) -> int:
    """How many of `process`'s own devices sample: `mesh.sampler_devices` on the leader,
    `mesh.sampler_devices_per_host` (0: it only trains) on every other process."""
    if process == multihost.LEADER:
        return int(mesh_config.sampler_devices)
    return int(mesh_config.sampler_devices_per_host)


def build_layout(mesh_config: ml_collections.ConfigDict) -> Layout:
    """Splits the devices: each process's sampler takes the first `sampler_count` of its own
    devices (one tensor-parallel replica), the trainer every other device of every process."""
    sampler_devices = []
    for process in range(jax.process_count()):
        own = [d for d in jax.devices() if d.process_index == process]
        n = sampler_count(mesh_config, process)
        if process == multihost.LEADER and not 0 < n < len(own):
            raise ValueError(
                f"mesh.sampler_devices={n}: process 0 has {len(own)} devices and must keep at "
                "least one for the trainer (it takes part in every train step)")
        if n >= len(own):
            raise ValueError(
                f"mesh.sampler_devices_per_host={n}: process {process} has {len(own)} devices "
                "and must keep at least one for the trainer (it takes part in every train step)")
        sampler_devices += own[:n]
    trainer_devices = [d for d in jax.devices() if d not in sampler_devices]
    t = mesh_config.trainer
    trainer = make_mesh(data=t.data, fsdp=t.fsdp, tensor=t.tensor, devices=trainer_devices)
    mine = [d for d in sampler_devices if d.process_index == jax.process_index()]
    sampler = make_mesh(data=1, fsdp=1, tensor=len(mine), devices=mine) if mine else None
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


def samplers_on_followers(config: ml_collections.ConfigDict) -> bool:
    """Whether the followers sample too (then the leader runs a rollout hub for them)."""
    return jax.process_count() > 1 and int(config.mesh.sampler_devices_per_host) > 0


def load_sampler_policy(config: ml_collections.ConfigDict, policy_dir: pathlib.Path,
                        mesh: Mesh, tokenizer: Any) -> policy_lib.Policy:
    """The sampler's own copy, on its own devices: parameters as the trainer's (so weight
    updates keep shapes and dtypes, hence compile nothing), compute in `model.dtype`."""
    model = load_hf(policy_dir, mesh=mesh,
                    **({"dtype": _dtype(config.model.dtype)} if config.model.dtype else {}))
    return policy_lib.Policy(model, tokenizer, config.model.parser)


def hub_settings(config: ml_collections.ConfigDict, policy: policy_lib.Policy, engine,
                 policy_dir: pathlib.Path) -> HubSettings:
    """What the leader's rollout hub serves the followers' samplers."""
    spec = make_spec(policy.model.cfg, str(policy_dir), config.env.controller_url,
                     engine.engine.config,
                     rl_stage.agent_spec(config.rl, policy, config.rl.pipeline.stale_policy_ratio))
    return HubSettings(spec)


def hub_starter(config: ml_collections.ConfigDict, channel: multihost.Channel):
    """Starts the pipeline's hub on its event loop and sends the followers its URL as they
    reach it (`mesh.hub_host`, default this host's name): the set-up message."""

    async def start(hub: RolloutHub) -> None:
        bind = config.mesh.hub_host or "0.0.0.0"
        url = await hub.start(host=bind)
        if not config.mesh.hub_host:
            url = url.replace(f"//{bind}:", f"//{socket.getfqdn()}:")
        channel.send(SETUP, {"hub": url})

    return start


async def lead(config: ml_collections.ConfigDict, layout: Layout, policy_dir: pathlib.Path,
               model: Decoder, reference: Decoder | None,
               make_driver: rl_stage.DriverFactory,
               channel: multihost.Channel | None = None) -> rl_stage.RLResult:
    """Process 0: sampler, controller, the RL pipeline, evaluation and export; with samplers
    on the followers, their rollout hub, whose URL goes to them over `channel` (the set-up
    message) and whose record is written to `log_dir/rollout_hub.json` at the end."""
    log_dir = log_dir_of(config)
    log_dir.mkdir(parents=True, exist_ok=True)
    (log_dir / "config.json").write_text(config.to_json(indent=1, sort_keys=True))
    metrics = MetricsLog(log_dir)
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(policy_dir)
    policy = policy_lib.Policy(model, tokenizer, config.model.parser)
    sampler_policy = load_sampler_policy(config, policy_dir, layout.sampler, tokenizer)
    try:
        with rl_stage.make_engine(config.rl, sampler_policy, mesh=layout.sampler) as engine:
            remote = start_hub = None
            if samplers_on_followers(config):
                remote = hub_settings(config, policy, engine, policy_dir)
                start_hub = hub_starter(config, channel)
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
                    make_driver=make_driver, remote=remote, start_hub=start_hub)
                if result.hub is not None:
                    (log_dir / "rollout_hub.json").write_text(
                        json.dumps(result.hub.report(), indent=1))
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


# ----------------------------------------------------------------------------- followers


def follow(config: ml_collections.ConfigDict, layout: Layout, policy_dir: pathlib.Path,
           model: Decoder, reference: Decoder | None,
           channel: multihost.Channel) -> TrainState:
    """A follower: trains with the leader (`rl_stage.follow_rl`); with sampler devices of its
    own, also samples there (`pipeline.host_sampler`), claiming groups from the leader's hub
    (its URL comes with the set-up message) and installing the weights it gathers with the
    trainer, device to device (`mesh.weight_transfer="device"`) or through host memory."""
    samplers: list[HostSampler] = []
    place = start = None
    if samplers_on_followers(config):
        from transformers import AutoTokenizer

        sampler_policy = load_sampler_policy(config, policy_dir, layout.sampler,
                                             AutoTokenizer.from_pretrained(policy_dir))
        engine = rl_stage.make_engine(config.rl, sampler_policy, mesh=layout.sampler)
        device = config.mesh.weight_transfer == "device"
        if device:
            place = onto(weights_lib.weight_shardings(sampler_policy.model, layout.sampler))

        def start():  # once the trainer is set up: the leader's hub is up and sends its URL
            setup = channel.receive()
            if setup.kind != SETUP:
                raise RuntimeError(f"expected the leader's {SETUP!r} message, got "
                                   f"{setup.kind!r}")
            sampler = HostSampler(
                setup.meta["hub"], engine, device=device,
                worker_id=f"process{jax.process_index()}",
                concurrency=max(1, int(config.rl.engine.max_batch)
                                // int(config.rl.pipeline.group_size)),
                seed=int(config.seed) + jax.process_index())
            sampler.start()
            samplers.append(sampler)
            return sampler.receive

    make_driver = functools.partial(MultiHostDriver, channel=channel, place=place)
    try:
        return rl_stage.follow_rl(config.rl, model=model, trainer_mesh=layout.trainer,
                                  run_dir=config.run_dir, make_driver=make_driver,
                                  reference=reference, sampler=start)
    finally:
        for sampler in samplers:
            sampler.stop()


# ----------------------------------------------------------------------------- the job


def run(config: ml_collections.ConfigDict) -> TrainState:
    """Runs this process's part of the job (after `multihost.initialize`); returns its final
    train state (on several processes, each holds its own shards)."""
    check_config(config)
    layout = build_layout(config.mesh)
    policy_dir = policy_lib.pretrained_dir(config.model)
    model, reference = load_trainer_models(config, policy_dir, layout.trainer)
    make_driver: rl_stage.DriverFactory = TrainerDriver
    channel = None
    if jax.process_count() > 1:
        channel = multihost.Channel(layout.trainer.devices.flat)
        make_driver = functools.partial(MultiHostDriver, channel=channel)
    if not multihost.is_leader():
        return follow(config, layout, policy_dir, model, reference, channel)
    result = asyncio.run(lead(config, layout, policy_dir, model, reference, make_driver,
                              channel))
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
