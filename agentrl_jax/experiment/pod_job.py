"""The job on a TPU pod (or any multi-host JAX cluster): `config.deployment = "pod"`.

Every process builds a `PodDeployment` after `multihost.initialize` and runs
`experiment.job.run_job` with it. Process 0 leads: it runs the job's graph of stages
(`experiment/job.py`: evaluation, RL, evaluation, export, report, each marked in the local run
directory), with its first sampler replica in process and the RL pipeline; every other process
follows, training with it (SPMD) in the RL stage and, with sampler replicas of its own,
sampling for it through the leader's rollout hub (`pipeline/host_sampler.py`). How the
processes divide the work is described in `pipeline/multihost.py`; the meshes come from
`pipeline/pod_layout.py`. The RL stage runs on every start (the followers train only inside
it): a resumed run continues from its last checkpoint, one resumed after its last step trains
nothing and restores the trained weights for the stages after it.

Steps, on every process unless marked:
  1. `jax.distributed.initialize` (multi-host; before any JAX computation)
  2. meshes (`pipeline.pod_layout`): sampler replicas on `mesh.sampler_devices` of process 0's
     local devices and `mesh.sampler_devices_per_host` of every other's (or
     `mesh.sampler_devices_by_process`), tensor parallel within a host, one replica per process
     or `mesh.sampler_tensor_parallel` devices each; the trainer mesh is every other device
     (`mesh.trainer`: data × fsdp × tensor)
  3. the policy from the HF directory `model.path`, sharded onto the trainer mesh (and, when the
     loss has a KL term, a frozen bf16 reference beside it); each sampler replica loads its own
     copy onto its devices. Process 0's first replica is the pipeline's engine; every other one
     is a `pipeline.host_sampler.HostSampler` that claims groups from process 0's rollout hub
     (whose URL process 0 sends first) and takes its weights from the trainer's gather on its
     own process
  4. RL through the controller at `env.controller_url` (an AgentRL controller or
     `python -m launch.env_fleet`), checkpointed to `run_dir/checkpoints` (a local path or a
     bucket URL; on several hosts it must be storage every host reaches); a restarted run
     resumes there
  5. process 0: evaluation on the test split (`eval.after_rl`; `eval.before_rl` too)
  6. process 0: the trained policy exported as an HF directory (`export.dir`, default
     `run_dir/final_model`)

The stage markers, config.json, metrics, evaluation results and TensorBoard go to `log_dir`
(default: `run_dir` when it is local, `experiment/run_dir.local_dir`); with a bucket `run_dir`
they are written locally and copied to `run_dir/logs` at the end. The config is resolved and
frozen once (`experiment/run_config.py`) before any process joins the others.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import pathlib
import socket
from collections.abc import Callable
from typing import Any

import jax
import ml_collections
from jax.sharding import Mesh

from agentrl_jax import precision
from agentrl_jax.experiment import policy as policy_lib
from agentrl_jax.experiment import rl_stage
from agentrl_jax.experiment.export_stage import copy_files
from agentrl_jax.experiment.run_dir import is_url
from agentrl_jax.models.decoder import Decoder
from agentrl_jax.models.hf_io import load_hf
from agentrl_jax.pipeline import multihost, pod_layout
from agentrl_jax.pipeline.host_sampler import HostSampler, feed, replica_name
from agentrl_jax.pipeline.pod_layout import Layout
from agentrl_jax.pipeline.rollout_hub import HubSettings, RolloutHub
from agentrl_jax.pipeline.sampling_worker import make_spec
from agentrl_jax.pipeline.trainer_driver import (
    MultiHostDriver,
    OnWeights,
    TrainerDriver,
    onto_each,
    trainer_config,
)
from agentrl_jax.rl import train_step
from agentrl_jax.rl.train_step import TrainState
from agentrl_jax.sampling import weights as weights_lib
from agentrl_jax.sampling.async_engine import AsyncSamplingEngine

SETUP = "setup"  # the leader's first message when the followers sample: the hub's URL


# ----------------------------------------------------------------------------- config


def check_config(config: ml_collections.ConfigDict) -> None:
    """Refuses a config a pod cannot run, with what to set (before anything starts)."""
    if config.get("deployment") != "pod":
        raise ValueError(f"deployment is {config.get('deployment')!r}: a pod runs a config with "
                         "deployment='pod' (configs/agentbench_fc/); run the others with "
                         "launch.local")
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
    pod_layout.check_counts(config.mesh)
    if config.mesh.weight_transfer not in ("device", "host"):
        raise ValueError(f"mesh.weight_transfer must be device or host, not "
                         f"{config.mesh.weight_transfer!r}")
    if config.rl.pipeline.mode != "async" and config.rl.pipeline.mode != "sync":
        raise ValueError(f"rl.pipeline.mode must be async or sync, not {config.rl.pipeline.mode}")
    trainer_config(config.rl)   # a trainer temperature apart from the sampler's


# ----------------------------------------------------------------------------- samplers


def load_trainer_models(config: ml_collections.ConfigDict, policy_dir: pathlib.Path,
                        mesh: Mesh) -> tuple[Decoder, Decoder | None]:
    """The policy on the trainer mesh (fp32 master weights) and the KL reference (bf16)."""
    model = load_hf(policy_dir, mesh=mesh)
    reference = None
    if train_step.needs_reference(config.rl.trainer):
        reference = load_hf(policy_dir, mesh=mesh, dtype=train_step.REFERENCE_DTYPE,
                            param_dtype=train_step.REFERENCE_DTYPE)
    return model, reference


# ----------------------------------------------------------------------------- the leader


def load_sampler_policy(config: ml_collections.ConfigDict, policy_dir: pathlib.Path,
                        mesh: Mesh, tokenizer: Any) -> policy_lib.Policy:
    """A sampler replica's own copy, on its own devices, in the engine's dtype
    (`rl.engine.compute_dtype`; unset: as stored)."""
    dtype = precision.jax_dtype(config.rl.engine.get("compute_dtype"))
    model = load_hf(policy_dir, mesh=mesh,
                    **({"dtype": dtype, "param_dtype": dtype} if dtype is not None else {}))
    return policy_lib.Policy(model, tokenizer, config.model.parser)


def replica_engines(config: ml_collections.ConfigDict, policy_dir: pathlib.Path,
                    meshes: list[Mesh], tokenizer: Any
                    ) -> tuple[list[AsyncSamplingEngine], list[Any]]:
    """One engine (not started) per sampler mesh, each over its own copy of the policy, and
    the shardings of each one's weights (where a device-to-device placement puts them)."""
    engines, shardings = [], []
    for mesh in meshes:
        policy = load_sampler_policy(config, policy_dir, mesh, tokenizer)
        engines.append(rl_stage.make_engine(config.rl, policy, mesh=mesh))
        shardings.append(weights_lib.weight_shardings(policy.model, mesh))
    return engines, shardings


def start_host_samplers(config: ml_collections.ConfigDict, hub_url: str,
                        engines: list[AsyncSamplingEngine], first_replica: int, *, device: bool,
                        into: list[HostSampler]) -> None:
    """A started `HostSampler` per engine, claiming from the hub at `hub_url`, appended to
    `into` (the list this process's `host_sampler.feed` hands the weights to)."""
    for i, engine in enumerate(engines):
        sampler = HostSampler(
            hub_url, engine, device=device,
            worker_id=replica_name(jax.process_index(), first_replica + i),
            concurrency=max(1, int(config.rl.engine.max_batch)
                            // int(config.rl.pipeline.group_size)),
            seed=int(config.seed) + 1000 * jax.process_index() + first_replica + i)
        sampler.start()
        into.append(sampler)


def device_transfer(config: ml_collections.ConfigDict) -> bool:
    """Whether host samplers take gathered layers device to device: `mesh.weight_transfer`,
    except with LoRA, whose adapters (a few MB) go through host memory."""
    return config.mesh.weight_transfer == "device" and not config.rl.trainer.lora.enabled


def hub_settings(config: ml_collections.ConfigDict, policy: policy_lib.Policy, engine,
                 policy_dir: pathlib.Path, controller_url: str) -> HubSettings:
    """What the leader's rollout hub serves the host samplers (with LoRA, `rl_stage.run_rl`
    adds the adapters' base once the trainer exists)."""
    spec = make_spec(policy.model.cfg, str(policy_dir), controller_url,
                     engine.engine.config,
                     rl_stage.agent_spec(config.rl, policy, config.rl.pipeline.stale_policy_ratio))
    return HubSettings(spec)


def hub_starter(config: ml_collections.ConfigDict, layout: Layout,
                channel: multihost.Channel | None, start_own: Callable[[str], None]):
    """Starts the pipeline's hub on its event loop; sends the followers its URL as they reach
    it (`mesh.hub_host`, default this host's name; the set-up message) when any of them
    samples; then `start_own(url)` starts the leader's own host samplers (loopback)."""

    async def start(hub: RolloutHub) -> None:
        bind = config.mesh.hub_host or "0.0.0.0"
        url = await hub.start(host=bind)
        if layout.followers_sample:
            assert channel is not None, "followers sample only in a multi-process run"
            reached = url if config.mesh.hub_host else url.replace(
                f"//{bind}:", f"//{socket.getfqdn()}:")
            channel.send(SETUP, {"hub": reached})
        start_own(url.replace("//0.0.0.0:", "//127.0.0.1:"))

    return start


# ----------------------------------------------------------------------------- followers


def follow(config: ml_collections.ConfigDict, layout: Layout, policy_dir: pathlib.Path,
           model: Decoder, reference: Decoder | None,
           channel: multihost.Channel) -> TrainState:
    """A follower: trains with the leader (`rl_stage.follow_rl`); with sampler replicas of its
    own, also samples there (`pipeline.host_sampler`), claiming groups from the leader's hub
    (its URL comes with the set-up message, which every follower receives when any samples)
    and installing the weights it gathers with the trainer, device to device
    (`mesh.weight_transfer="device"`: one placed copy per replica) or through host memory."""
    samplers: list[HostSampler] = []
    engines: list[AsyncSamplingEngine] = []
    device = device_transfer(config)
    place = None
    if layout.samplers:
        from transformers import AutoTokenizer

        engines, shardings = replica_engines(config, policy_dir, layout.samplers,
                                             AutoTokenizer.from_pretrained(policy_dir))
        if device:
            place = onto_each(shardings)

    def start() -> OnWeights | None:  # once the trainer is set up: the hub is up, sends its URL
        setup = channel.receive()
        if setup.kind != SETUP:
            raise RuntimeError(f"expected the leader's {SETUP!r} message, got {setup.kind!r}")
        if not engines:
            return None  # this process only trains; it took part in the broadcast
        start_host_samplers(config, setup.meta["hub"], engines, 0, device=device, into=samplers)
        return feed(samplers, device)

    make_driver = functools.partial(MultiHostDriver, channel=channel, place=place,
                                    sampler_dtype=config.rl.engine.get("compute_dtype"))
    try:
        return rl_stage.follow_rl(config.rl, model=model, trainer_mesh=layout.trainer,
                                  run_dir=config.run_dir, make_driver=make_driver,
                                  reference=reference,
                                  sampler=start if layout.followers_sample else None)
    finally:
        for sampler in samplers:
            sampler.stop()


# ----------------------------------------------------------------------------- the deployment


class PodDeployment:
    """The pod's part of the job (`experiment/deployment.py`'s `Deployment`): made on every
    process, which loads its shards of the trainer's models and joins the others' channel;
    process 0 leads the job's graph, the others `follow`. `state`: this process's final train
    state once RL is over (on several processes, each holds its own shards).

    The leader's first sampler replica is the pipeline's engine; with more replicas (its own
    further ones, the followers'), the RL stage serves them through its rollout hub, whose URL
    goes to the followers over the channel (the set-up message) and whose record is written
    to LOG_DIR/rollout_hub.json. The leader's further replicas take each weight version from
    its driver. On several processes (`mesh.weight_transfer="device"`, no LoRA) the trainer's
    gather is placed on every replica of a host device to device, the first's copy going to
    the pipeline as `PlacedWeights`; otherwise the weights come through host memory."""

    warm_starts = False
    resumes_from_checkpoints = True
    probes = False   # a forward pass on the leader alone: the trainer's mesh spans the pod

    def __init__(self, config: ml_collections.ConfigDict):
        check_config(config)
        self.config = config
        self.layout = pod_layout.build_layout(config.mesh)
        self.policy_dir = policy_lib.pretrained_dir(config.model)
        self.model, self.reference = load_trainer_models(config, self.policy_dir,
                                                         self.layout.trainer)
        self.channel: multihost.Channel | None = None
        self.make_driver: Callable[..., TrainerDriver] = TrainerDriver
        if jax.process_count() > 1:
            self.channel = multihost.Channel(list(self.layout.trainer.devices.flat))
            self.make_driver = functools.partial(
                MultiHostDriver, channel=self.channel,
                sampler_dtype=config.rl.engine.get("compute_dtype"))
        self.leads = multihost.is_leader()
        self.state: TrainState | None = None
        self._driver: TrainerDriver | None = None
        self._extra_engines: list[AsyncSamplingEngine] = []
        self._own: list[HostSampler] = []
        self._place: Any = None
        # Several processes: the trainer's gather lands on every replica of this host, device
        # to device (one process: the local driver's device copy goes to the replicas' own).
        self._device = self.channel is not None and device_transfer(config)

    def open(self, policy_dir: pathlib.Path, stack: contextlib.AsyncExitStack
             ) -> tuple[policy_lib.Policy, AsyncSamplingEngine]:
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(self.policy_dir)
        policy = policy_lib.Policy(self.model, tokenizer, self.config.model.parser)
        (first, *self._extra_engines), shardings = replica_engines(
            self.config, self.policy_dir, self.layout.samplers, tokenizer)
        # Where the trainer's gather lands: the replicas' own devices (`_device`).
        self._place = onto_each(shardings) if self._device else None
        stack.callback(self._stop_own_samplers)
        return policy, stack.enter_context(first)

    def rl_options(self, policy: policy_lib.Policy, engine: AsyncSamplingEngine,
                   controller_url: str) -> dict[str, Any]:
        config, options = self.config, {}
        make_driver = self.make_driver
        if self._place is not None:
            make_driver = functools.partial(make_driver, place=self._place)
        if self.layout.needs_hub:
            options["remote"] = hub_settings(config, policy, engine, self.policy_dir,
                                             controller_url)
            options["start_hub"] = hub_starter(
                config, self.layout, self.channel, lambda url: start_host_samplers(
                    config, url, self._extra_engines, 1, device=self._device, into=self._own))
            make_driver = functools.partial(make_driver, on_weights=feed(
                self._own, device=self._device, first=1))
        return {**options, "trainer_mesh": self.layout.trainer, "reference": self.reference,
                "make_driver": make_driver}

    def after_rl(self, result: rl_stage.RLResult, local_dir: pathlib.Path) -> None:
        self._stop_own_samplers()
        self.state, self._driver = result.state, result.driver
        if result.hub is not None:
            (local_dir / "rollout_hub.json").write_text(json.dumps(result.hub.report(),
                                                                   indent=1))

    def finish(self, local_dir: pathlib.Path) -> None:
        if self._driver is not None:
            self._driver.done()   # the followers return (they waited for evaluation, export)
        if is_url(self.config.run_dir):
            copy_files(local_dir, os.path.join(self.config.run_dir, "logs"))

    def follow(self) -> None:
        assert self.channel is not None, "a follower is one of several processes"
        self.state = follow(self.config, self.layout, self.policy_dir, self.model,
                            self.reference, self.channel)

    def _stop_own_samplers(self) -> None:
        while self._own:
            self._own.pop().stop()
