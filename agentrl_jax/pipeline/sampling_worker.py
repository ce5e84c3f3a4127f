"""An out-of-process sampling worker: `python -m agentrl_jax.pipeline.sampling_worker --hub URL`.

It builds its own engine from the hub's `spec` and weights, then loops: heartbeat (and fetch any
newer weight version of each policy), claim a group, play its G episodes against the controller
named in the spec, post the rollouts. `--concurrency` groups are played at once. It holds no
state worth saving: kill it at any time; the hub fails its unfinished groups and a restarted
worker claims fresh ones.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import logging
import random
import uuid
from typing import Any

import httpx
from flax import nnx

from agentrl_jax.controller.client import ControllerClient
from agentrl_jax.models.config import ModelConfig
from agentrl_jax.models.decoder import Decoder
from agentrl_jax.pipeline.wire_format import rollout_to_json, weights_from_bytes
from agentrl_jax.rollout.agent_loop import AgentSpec, EpisodeLimits, run_episode
from agentrl_jax.rollout.cross_policy import PolicyMix
from agentrl_jax.sampling import AsyncSamplingEngine, EngineConfig, SamplingEngine, SamplingParams
from agentrl_jax.tree_digest import tree_digest

log = logging.getLogger(__name__)


def make_spec(model_config: ModelConfig, tokenizer: str, controller_url: str,
              engine: EngineConfig, agent: AgentSpec) -> dict[str, Any]:
    """What a remote worker needs to reproduce the trainer's sampling setup (JSON-able)."""
    return {
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
                 heartbeat_s: float = 1.0, seed: int = 0):
        self.hub_url = hub_url.rstrip("/")
        self.concurrency = concurrency
        self.worker_id = worker_id or uuid.uuid4().hex[:12]
        self.heartbeat_s = heartbeat_s
        self._rng = random.Random(seed)
        self._versions: dict[str, int] = {}

    async def run(self) -> None:
        async with httpx.AsyncClient(base_url=self.hub_url, timeout=600) as hub:
            spec = (await hub.get("/spec")).raise_for_status().json()
            from transformers import AutoTokenizer

            from agentrl_jax.models.zoo import resolve_model_dir

            tokenizer = AutoTokenizer.from_pretrained(resolve_model_dir(spec["tokenizer"]))
            cfg = ModelConfig.from_hf(spec["model_config"])
            version, weights = await self._fetch(hub, "current")
            engine = AsyncSamplingEngine(SamplingEngine(
                decoder_from_weights(cfg, weights), EngineConfig(**_tuples(spec["engine"])),
                version=version))
            self._versions["current"] = version
            agent = AgentSpec(
                tokenizer=tokenizer, sampling=SamplingParams(**_tuples(spec["sampling"])),
                limits=EpisodeLimits(**spec["limits"]), policy_mix=PolicyMix(spec["policy_mix"]),
                parser=spec["parser"],
                end_of_turn_ids=tuple(spec["end_of_turn_ids"] or ()) or None)
            with engine:
                await self._heartbeat(hub, engine)
                async with ControllerClient(spec["controller"], start_jitter_s=0) as client:
                    loops = [self._heartbeat_forever(hub, engine)] + [
                        self._claim_loop(hub, client, engine, agent, spec["group_size"])
                        for _ in range(self.concurrency)]
                    await asyncio.gather(*loops)

    async def _fetch(self, hub: httpx.AsyncClient, policy: str, attempts: int = 3):
        """(version, weights) of `policy`, checked against the hub's checksum; a corrupted
        download is fetched again, and never served."""
        for _ in range(attempts):
            response = (await hub.get("/weights", params={"policy": policy})).raise_for_status()
            weights = weights_from_bytes(response.content)
            if tree_digest(weights) == response.headers["x-checksum"]:
                return int(response.headers["x-version"]), weights
            log.warning("weights of %s v%s failed their checksum; fetching again", policy,
                        response.headers["x-version"])
        raise RuntimeError(f"weights of policy {policy!r} failed their checksum {attempts} times")

    async def _heartbeat(self, hub: httpx.AsyncClient, engine: AsyncSamplingEngine) -> None:
        reply = (await hub.post("/heartbeat", json={"worker_id": self.worker_id})).json()
        for policy, version in reply["versions"].items():
            if self._versions.get(policy) != version:
                version, weights = await self._fetch(hub, policy)
                await engine.update_params(weights, version, policy=policy)
                self._versions[policy] = version

    async def _heartbeat_forever(self, hub, engine) -> None:
        while True:
            await asyncio.sleep(self.heartbeat_s)
            try:
                await self._heartbeat(hub, engine)
            except httpx.TransportError as error:
                log.warning("hub unreachable: %r", error)

    async def _claim_loop(self, hub, client, engine, agent, group_size: int) -> None:
        while True:
            response = await hub.post("/claim", json={"worker_id": self.worker_id})
            if response.status_code != 200:
                await asyncio.sleep(0.2)
                continue
            claim = response.json()
            seeds = [self._rng.getrandbits(32) for _ in range(group_size)]
            rollouts = await asyncio.gather(*(
                run_episode(client, engine, agent, claim["task"], claim["index"],
                            group_id=claim["group_id"], member=m, rng=random.Random(seeds[m]))
                for m in range(group_size)))
            await hub.post("/rollouts", json={
                "worker_id": self.worker_id,
                "rollouts": [rollout_to_json(r) for r in rollouts]})


def _tuples(d: dict[str, Any]) -> dict[str, Any]:
    """JSON turned the dataclasses' tuples into lists; frozen dataclasses want them back."""
    return {k: tuple(v) if isinstance(v, list) else v for k, v in d.items()}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m agentrl_jax.pipeline.sampling_worker",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--hub", required=True, help="the trainer's rollout hub API URL")
    parser.add_argument("--concurrency", type=int, default=4, help="groups played at once")
    parser.add_argument("--worker-id", default=None)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    print(f"sampling worker starting, hub {args.hub}", flush=True)
    asyncio.run(SamplingWorker(args.hub, args.concurrency, args.worker_id, seed=args.seed).run())


if __name__ == "__main__":
    main()
