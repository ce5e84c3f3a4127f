"""An out-of-process sampling worker: `python -m agentrl_jax.pipeline.sampling_worker --hub URL`.

It builds its own engine from the hub's `spec` and weights, then loops: heartbeat (and fetch any
newer weight version of each policy), claim a group, play its G episodes against the controller
named in the spec, post the rollouts. `--concurrency` groups are played at once. It holds no
state worth saving: kill it at any time; the hub fails its unfinished groups and a restarted
worker claims fresh ones.

With LoRA (`spec["adapters"]`, `adapter_spec`), the worker loads the base once itself, from the
model source the trainer names, holds it as training does (`lora.cast_base`) and refuses to
start (`BaseMismatchError`) unless its fingerprint is the trainer's; every weight version is
then an adapter alone, served unmerged over that one base (`sampling.adapter_engine`), and the
stale policy is one more adapter. Every update, full or adapter, is verified: a download that
fails or does not match the hub's checksum is fetched again (`FETCH_ATTEMPTS`), and, while it
keeps failing, the worker serves the version it had. Each heartbeat reports the (version,
checksum) the worker serves per policy, which the hub checks against what it published.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import logging
import random
import uuid
from typing import TYPE_CHECKING, Any

import httpx
from flax import nnx

from agentrl_jax import compile_cache
from agentrl_jax.controller.client import ControllerClient
from agentrl_jax.dataclass_config import dataclass_from
from agentrl_jax.models import lora as lora_lib
from agentrl_jax.models.config import LoraConfig, ModelConfig
from agentrl_jax.models.decoder import Decoder
from agentrl_jax.pipeline.wire_format import rollout_to_json, weights_from_bytes
from agentrl_jax.rollout.agent_loop import AgentSpec, EpisodeLimits, play_group
from agentrl_jax.rollout.cross_policy import TRAINED_POLICY, PolicyMix
from agentrl_jax.sampling import AsyncSamplingEngine, EngineConfig, SamplingEngine, SamplingParams
from agentrl_jax.sampling.adapter_engine import AdapterSamplingEngine
from agentrl_jax.tree_digest import tree_digest

if TYPE_CHECKING:
    from agentrl_jax.rl.train_step import Trainer

log = logging.getLogger(__name__)

FETCH_ATTEMPTS = 3  # downloads of one version per heartbeat before serving the old one on


class UpdateRefused(RuntimeError):
    """A weight version could not be fetched intact (lost, or failing its checksum)."""


def make_spec(model_config: ModelConfig, tokenizer: str, controller_url: str,
              engine: EngineConfig, agent: AgentSpec,
              adapters: dict[str, Any] | None = None) -> dict[str, Any]:
    """What a remote worker needs to reproduce the trainer's sampling setup (JSON-able).

    `adapters`: `adapter_spec(trainer, base_model)` for a LoRA trainer, whose updates are
    adapters alone; None when they are full weights.
    """
    spec = {
        "model_config": model_config.to_hf(),
        "tokenizer": tokenizer,
        "controller": controller_url,
        "engine": dataclasses.asdict(engine),
        "sampling": {k: list(v) if isinstance(v, tuple) else v
                     for k, v in dataclasses.asdict(agent.sampling).items()},
        "limits": dataclasses.asdict(agent.limits),
        "policy_mix": dict(agent.policy_mix.weights),
        "parser": agent.parser,
        "end_of_turn_ids": list(agent.end_of_turn_ids) if agent.end_of_turn_ids else None,
    }
    if adapters is not None:
        spec["adapters"] = adapters
    return spec


def adapter_spec(trainer: Trainer, base_model: str) -> dict[str, Any]:
    """What a worker needs to serve a LoRA trainer's adapters: the model source to load the base
    from (a zoo name or HF directory, the one the trainer's model came from), the fingerprint
    that base must have, and the adapter config (rank, alpha, targets, base dtype)."""
    if trainer.lora is None:
        raise ValueError("adapter_spec needs a LoRA trainer (trainer.lora)")
    return {"base_model": str(base_model), "base_fingerprint": trainer.base_fingerprint,
            **(trainer.adapter_config() or {})}


def adapter_model_from_spec(spec: dict[str, Any]) -> Decoder:
    """The worker's model for a LoRA spec: the base loaded from its source, held as training
    holds it, with fresh adapters (B = 0).

    Raises `BaseMismatchError` when that base is not the trainer's (another architecture, or
    another fingerprint): serving the trainer's adapters over it would sample another policy.
    """
    from agentrl_jax.models.hf_io import load_hf
    from agentrl_jax.models.zoo import resolve_model_dir

    adapters = spec["adapters"]
    source = adapters["base_model"]
    lora = LoraConfig(rank=int(adapters["rank"]), alpha=float(adapters["alpha"]),
                      targets=tuple(adapters["targets"]))
    model = load_hf(resolve_model_dir(source), lora=lora)
    want = ModelConfig.from_hf(spec["model_config"])
    if model.cfg.replace(lora=None) != want:
        raise lora_lib.BaseMismatchError(
            f"the worker's base model {source!r} is a {model.cfg.replace(lora=None)}, but the "
            f"trainer's model is a {want}")
    graphdef, fresh, base = lora_lib.split(model)
    base = lora_lib.cast_base(base, adapters.get("base_dtype"))
    fingerprint = lora_lib.base_fingerprint(base)
    if fingerprint != adapters["base_fingerprint"]:
        raise lora_lib.BaseMismatchError(
            f"the worker's base model {source!r} has fingerprint {fingerprint[:12]}, but the "
            f"trainer's adapters were trained over base {adapters['base_fingerprint'][:12]}: "
            "start the worker where that model source holds the trainer's base weights")
    return nnx.merge(graphdef, lora_lib.combine(base, fresh))


def decoder_from_weights(cfg: ModelConfig, weights: dict[str, Any]) -> Decoder:
    """A Decoder holding `weights` (sampler layout), without initialising random ones first."""
    model = nnx.eval_shape(lambda: Decoder(cfg, rngs=nnx.Rngs(0)))
    model.embed.set_value(weights["embed"])
    model.final_norm.set_value(weights["final_norm"])
    if "lm_head" in weights:
        model.lm_head.set_value(weights["lm_head"])
    for name, value in weights["layers"].items():
        getattr(model.layers, name).set_value(value)
    return model


class SamplingWorker:
    def __init__(self, hub_url: str, concurrency: int = 4, worker_id: str | None = None,
                 heartbeat_s: float = 1.0, seed: int = 0,
                 transport: httpx.AsyncBaseTransport | None = None):
        """`transport`: the HTTP transport to the hub (default: the network)."""
        self.hub_url = hub_url.rstrip("/")
        self.concurrency = concurrency
        self.worker_id = worker_id or uuid.uuid4().hex[:12]
        self.heartbeat_s = heartbeat_s
        self._rng = random.Random(seed)
        self._transport = transport
        self._served: dict[str, tuple[int, str]] = {}  # policy -> verified (version, checksum)

    def connect(self) -> httpx.AsyncClient:
        """An HTTP client of the hub's API."""
        return httpx.AsyncClient(base_url=self.hub_url, timeout=600, transport=self._transport)

    async def run(self) -> None:
        async with self.connect() as hub:
            spec = await self.spec(hub)
            from transformers import AutoTokenizer

            from agentrl_jax.models.zoo import resolve_model_dir

            tokenizer = AutoTokenizer.from_pretrained(resolve_model_dir(spec["tokenizer"]))
            engine = await self.build_engine(hub, spec)
            agent = AgentSpec(
                tokenizer=tokenizer, sampling=dataclass_from(spec["sampling"], SamplingParams),
                limits=dataclass_from(spec["limits"], EpisodeLimits),
                policy_mix=PolicyMix(spec["policy_mix"]),
                parser=spec["parser"],
                end_of_turn_ids=tuple(spec["end_of_turn_ids"] or ()) or None)
            with engine:
                await self.heartbeat(hub, engine)
                async with ControllerClient(spec["controller"], start_jitter_s=0) as client:
                    await self.serve(hub, client, engine, agent, spec["group_size"])

    async def serve(self, hub: httpx.AsyncClient, client: ControllerClient,
                    engine: AsyncSamplingEngine, agent: AgentSpec, group_size: int) -> None:
        """The heartbeat and `concurrency` claim loops, until one fails (its error is raised)
        or the worker is cancelled. Returns only once every loop has ended, so an episode in
        flight ends its session before the caller closes the client (`gather` would return at
        the first cancelled loop, and leave the others running when one fails)."""
        try:
            async with asyncio.TaskGroup() as loops:
                loops.create_task(self._heartbeat_forever(hub, engine))
                for _ in range(self.concurrency):
                    loops.create_task(self._claim_loop(hub, client, engine, agent, group_size))
        except ExceptionGroup as failed:  # the first failure, as it was raised
            raise failed.exceptions[0] from failed

    @staticmethod
    async def spec(hub: httpx.AsyncClient) -> dict[str, Any]:
        return (await hub.get("/spec")).raise_for_status().json()

    async def build_engine(self, hub: httpx.AsyncClient, spec: dict[str, Any]
                           ) -> AsyncSamplingEngine:
        """The worker's engine (not started): over the base it loads itself and verifies, for
        adapters; over the first full weights it downloads, otherwise."""
        config = dataclass_from(spec["engine"], EngineConfig)
        if "adapters" in spec:
            model = adapter_model_from_spec(spec)
            return AdapterSamplingEngine(SamplingEngine(model, config), model)
        cfg = ModelConfig.from_hf(spec["model_config"])
        for _ in range(FETCH_ATTEMPTS):
            try:
                version, checksum, weights = await self._fetch(hub, TRAINED_POLICY)
            except UpdateRefused as error:
                log.warning("%s; fetching again", error)
                continue
            self._served[TRAINED_POLICY] = (version, checksum)
            return AsyncSamplingEngine(SamplingEngine(
                decoder_from_weights(cfg, weights), config, version=version))
        raise UpdateRefused(f"the first weights failed {FETCH_ATTEMPTS} downloads")

    def served(self) -> dict[str, tuple[int, str]]:
        """policy -> the verified (version, checksum) this worker serves."""
        return dict(self._served)

    async def _fetch(self, hub: httpx.AsyncClient, policy: str) -> tuple[int, str, Any]:
        """(version, checksum, weights) of `policy`, downloaded and checked against the hub's
        checksum; raises `UpdateRefused` for a lost or corrupted download."""
        try:
            response = (await hub.get("/weights", params={"policy": policy})).raise_for_status()
            version, checksum = int(response.headers["x-version"]), response.headers["x-checksum"]
            weights = weights_from_bytes(response.content)
        except (httpx.HTTPError, KeyError, ValueError) as error:  # ValueError: a torn blob
            raise UpdateRefused(f"weights of {policy!r} did not arrive: {error!r}") from error
        if tree_digest(weights) != checksum:
            raise UpdateRefused(f"weights of {policy!r} v{version} failed their checksum")
        return version, checksum, weights

    async def _update(self, hub: httpx.AsyncClient, engine: AsyncSamplingEngine,
                      policy: str, version: int) -> bool:
        """Fetches `policy`'s newest version (the hub named `version`) and serves it once
        verified; True if it does."""
        for attempt in range(1, FETCH_ATTEMPTS + 1):
            try:
                version, checksum, weights = await self._fetch(hub, policy)
            except UpdateRefused as error:
                log.warning("%s (attempt %d/%d)", error, attempt, FETCH_ATTEMPTS)
                continue
            if isinstance(engine, AdapterSamplingEngine):
                # The engine checks the arrays it placed on its devices against the checksum.
                served = await engine.receive(policy, version, weights, checksum)
                if tuple(served) != (version, checksum):
                    log.warning("adapters of %s v%d refused by the engine (attempt %d/%d)",
                                policy, version, attempt, FETCH_ATTEMPTS)
                    continue
            else:
                await engine.update_params(weights, version, policy=policy)
            self._served[policy] = (version, checksum)
            return True
        log.warning("serving %s at %s until its newer version arrives intact", policy,
                    self._served.get(policy))
        return False

    async def heartbeat(self, hub: httpx.AsyncClient, engine: AsyncSamplingEngine) -> None:
        """Tells the hub what this worker serves, then fetches any newer policy version."""
        reply = (await hub.post("/heartbeat", json={
            "worker_id": self.worker_id,
            "serving": {p: list(vc) for p, vc in self._served.items()}})).json()
        for policy, version in reply["versions"].items():
            if self._served.get(policy, (None,))[0] != version:
                await self._update(hub, engine, policy, version)

    async def _heartbeat_forever(self, hub, engine) -> None:
        while True:
            await asyncio.sleep(self.heartbeat_s)
            try:
                await self.heartbeat(hub, engine)
            except httpx.TransportError as error:
                log.warning("hub unreachable: %r", error)

    async def ready(self, hub: httpx.AsyncClient, engine: AsyncSamplingEngine) -> bool:
        """Whether to claim a group now: once some current weights are verified."""
        return TRAINED_POLICY in self._served

    async def _claim_loop(self, hub, client, engine, agent, group_size: int) -> None:
        while True:
            if not await self.ready(hub, engine):  # nothing verified to sample with yet
                await asyncio.sleep(0.2)
                continue
            response = await hub.post("/claim", json={"worker_id": self.worker_id})
            if response.status_code != 200:
                await asyncio.sleep(0.2)
                continue
            claim = response.json()
            rollouts = await play_group(client, engine, agent, claim["task"], claim["index"],
                                        group_id=claim["group_id"], group_size=group_size,
                                        rng=self._rng)
            await hub.post("/rollouts", json={
                "worker_id": self.worker_id,
                "rollouts": [rollout_to_json(r) for r in rollouts]})


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m agentrl_jax.pipeline.sampling_worker",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--hub", required=True, help="the trainer's rollout hub API URL")
    parser.add_argument("--concurrency", type=int, default=4, help="groups played at once")
    parser.add_argument("--worker-id", default=None)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    compile_cache.enable()
    print(f"sampling worker starting, hub {args.hub}", flush=True)
    asyncio.run(SamplingWorker(args.hub, args.concurrency, args.worker_id, seed=args.seed).run())


if __name__ == "__main__":
    main()
