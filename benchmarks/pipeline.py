"""Asynchronous against synchronous RL on the same config, with heavy-tailed environments.

Both runs train on the same number of trajectories (`groups_per_step` groups a step for
`steps` steps) with the real stack: controller and echo workers over HTTP whose every turn
waits a log-normal time (heavy tail: most turns are quick, a few take seconds, as sandboxed
tools and web pages do), the JAX sampling engine and trainer on a tiny model. Sync plays each
step's groups to the end before training; async keeps rollout workers going under a staleness
bound. Prints the wall-clock ratio and the staleness distribution of the async run; writes
benchmarks/results/pipeline.json (`async_vs_sync_wall`, `staleness_p50`, `staleness_max`).

    python -m benchmarks.pipeline [--steps 6] [--latency-sigma 1.2]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import jax  # noqa: E402
import numpy as np  # noqa: E402
from flax import nnx  # noqa: E402
from transformers import AutoTokenizer  # noqa: E402

from agentrl_jax.controller.app import create_controller_app  # noqa: E402
from agentrl_jax.controller.client import ControllerClient  # noqa: E402
from agentrl_jax.controller.config import ControllerConfig  # noqa: E402
from agentrl_jax.data import TaskStream  # noqa: E402
from agentrl_jax.models.config import ModelConfig  # noqa: E402
from agentrl_jax.models.decoder import Decoder  # noqa: E402
from agentrl_jax.models.zoo import resolve_model_dir  # noqa: E402
from agentrl_jax.pipeline import runner  # noqa: E402
from agentrl_jax.rl import advantages, train_step  # noqa: E402
from agentrl_jax.rollout.agent_loop import AgentSpec, EpisodeLimits  # noqa: E402
from agentrl_jax.sampling import (  # noqa: E402
    AsyncSamplingEngine,
    EngineConfig,
    SamplingEngine,
    SamplingParams,
)
from benchmarks.machine_info import write_result  # noqa: E402
from environments.echo import EchoTask  # noqa: E402
from environments.fleet import ServerThread  # noqa: E402
from environments.worker.server import WorkerConfig, create_worker_app  # noqa: E402


class SlowEchoTask(EchoTask):
    """The echo task, each turn delayed by a log-normal time (median `median_s`)."""

    def __init__(self, median_s: float, sigma: float, seed: int = 0, **kw):
        super().__init__(**kw)
        self.median_s, self.sigma = median_s, sigma
        self._rng = random.Random(seed)

    async def episode(self, index, session):
        original_action = session.action

        async def slow_action():
            await asyncio.sleep(min(self.median_s * self._rng.lognormvariate(0, self.sigma), 20))
            return await original_action()

        session.action = slow_action
        return await super().episode(index, session)


def build(tokenizer):
    cfg = ModelConfig.tiny("llama", vocab_size=len(tokenizer), hidden_size=64,
                           intermediate_size=128, num_layers=2, num_heads=4, num_kv_heads=2)
    model = Decoder(cfg, rngs=nnx.Rngs(0))
    engine = AsyncSamplingEngine(SamplingEngine(
        model, EngineConfig(max_batch=32, page_size=16, num_pages=1024, max_context=512,
                            prefill_buckets=(256,), context_buckets=(512,),
                            batch_buckets=(8, 32), steps_per_sync=4)))
    tcfg = train_step.default_config()
    tcfg.seq_buckets = (512,)
    tcfg.tokens_per_micro = 4096
    tcfg.optimizer.learning_rate = 1e-4
    mesh = jax.sharding.Mesh(np.array(jax.devices()[:1]).reshape(1, 1, 1),
                             ("data", "fsdp", "tensor"))
    return engine, train_step.Trainer(model, tcfg, mesh)


async def run_mode(api, engine, trainer, tokenizer, mode, args):
    pcfg = runner.default_config()
    pcfg.update(mode=mode, steps=args.steps, groups_per_step=args.groups, group_size=args.g,
                max_groups_per_step=args.groups, rollout_workers=args.groups * 3,
                max_staleness=args.staleness, stale_policy_ratio=0.0, seed=0)
    agent = AgentSpec(tokenizer=tokenizer, sampling=SamplingParams(max_new_tokens=16),
                      limits=EpisodeLimits(max_turns=4, max_context_tokens=512,
                                           max_new_tokens=16))
    reports = []
    async with ControllerClient(api, start_jitter_s=0) as client:
        stream = TaskStream({"echo": await client.get_indices("echo")}, seed=0)
        pipeline = runner.RLPipeline(pcfg, client=client, engine=engine, trainer=trainer,
                                     agent=agent, stream=stream,
                                     adv_config=advantages.default_config(),
                                     on_step=reports.append)
        start = time.perf_counter()
        await pipeline.run(trainer.init_state(0))
        wall = time.perf_counter() - start
    lags = [rep.step - 1 - v for rep in reports for r in rep.rollouts
            if (v := r.oldest_version()) is not None]
    trained = sum(len(rep.rollouts) for rep in reports)
    return wall, lags, trained


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--groups", type=int, default=4, help="groups per step")
    parser.add_argument("--g", type=int, default=4, help="rollouts per group")
    parser.add_argument("--staleness", type=int, default=2)
    # Half a second per environment step is typical of sandboxed shells, SQL servers and web
    # pages; the log-normal tail (sigma 1.5) makes one step in twenty take over 5 s.
    parser.add_argument("--latency-median", type=float, default=0.5)
    parser.add_argument("--latency-sigma", type=float, default=1.5)
    args = parser.parse_args()

    tokenizer = AutoTokenizer.from_pretrained(resolve_model_dir("smollm2-135m-instruct"))
    controller = ServerThread(create_controller_app(ControllerConfig())).start()
    task = SlowEchoTask(args.latency_median, args.latency_sigma, rounds=3, concurrency=256)
    worker = ServerThread(make_app=lambda api: create_worker_app(task, WorkerConfig(
        controller_api=controller.api, self_api=api, concurrency=256,
        heartbeat_interval_s=0.5))).start()
    time.sleep(1.5)  # first heartbeat registers the worker
    engine, trainer = build(tokenizer)
    results = {}
    with engine:
        # Warm-up: compile every engine and trainer shape outside the timed runs.
        warm = argparse.Namespace(**{**vars(args), "steps": 1})
        asyncio.run(run_mode(controller.api, engine, trainer, tokenizer, "sync", warm))
        for mode in ("sync", "async"):
            results[mode] = asyncio.run(
                run_mode(controller.api, engine, trainer, tokenizer, mode, args))
            print(f"  {mode:5s}: {results[mode][0]:7.1f} s for {results[mode][2]} trajectories")
    worker.stop()
    controller.stop()

    (sync_wall, _, sync_n), (async_wall, lags, async_n) = results["sync"], results["async"]
    figures = {
        "async_vs_sync_wall": sync_wall / async_wall,
        "sync_wall_s": sync_wall,
        "async_wall_s": async_wall,
        "trajectories_sync": sync_n,
        "trajectories_async": async_n,
        "staleness_p50": float(np.percentile(lags, 50)) if lags else 0.0,
        "staleness_max": float(max(lags)) if lags else 0.0,
        "staleness_mean": float(np.mean(lags)) if lags else 0.0,
        "steps": args.steps,
        "groups_per_step": args.groups,
        "group_size": args.g,
        "max_staleness": args.staleness,
        "latency_median_s": args.latency_median,
        "latency_sigma": args.latency_sigma,
    }
    print(f"async / sync wall-clock speed-up: {figures['async_vs_sync_wall']:.2f}x  "
          f"(staleness p50 {figures['staleness_p50']:.0f}, max {figures['staleness_max']:.0f})")
    print(f"wrote {write_result('pipeline', figures)}")


if __name__ == "__main__":
    main()
