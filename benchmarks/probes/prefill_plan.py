"""Prefill in multi-turn episodes: new tokens cut into bucket chunks against padded up (#30).

The main job's profile has prefill as its largest cost (29% of the first run, 41% of RL), and
a multi-turn agent's prefill is mostly continuations: each turn appends the last reply and an
observation to a cached context. The engine used to pad each turn's new tokens up to one length
bucket of (128, 512, 2048), so a 150-token observation computed 512 positions; now
`sampling.prefill_plan.PrefillPlanner` cuts them into chunks of (32, 128, 512) weighed against
a call's fixed cost.

Workload: `--episodes` episodes in lockstep, `--turns` turns each, `--new` tokens generated a
turn (greedy, no stop ids, so every variant decodes the same tokens at the same contexts). A
first prompt of 300-600 tokens; each later turn appends the reply and an observation whose
length is drawn from OBSERVATION_TOKENS. Random weights of SmolLM2-135M's shape with
`--layers` decoder layers (8 by default, so that the three engines compile in minutes; every
layer costs the same, so the ratio holds at 30 with the LM head aside: `--layers 30`).

Variants, each its own engine, warmed up (every shape compiled) before it is timed:
* `padded`: buckets (128, 512, 2048), as few calls as possible (the engine before);
* `planned_old_buckets`: the planner on (128, 512, 2048);
* `planned`: the planner on (32, 128, 512), the main job's configuration now.

Figures: prefill seconds and positions computed per token of each; `planned_vs_padded_prefill`
(the padded variant's prefill seconds over the planned one's) and `..._wall`.

    python -m benchmarks.probes.prefill_plan          # writes benchmarks/results/prefill_plan.json
    python -m benchmarks.probes.prefill_plan --layers 30 --name prefill_plan_30_layers
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np
from flax import nnx

from agentrl_jax import compile_cache
from agentrl_jax.models.decoder import Decoder
from agentrl_jax.sampling import EngineConfig, GenerateRequest, SamplingEngine, SamplingParams
from benchmarks.machine_info import write_result
from benchmarks.model_shapes import SMOLLM2_135M

# Deciles of the new prompt tokens per turn (the reply's end and the observation) in SmolLM2's
# 80 multi-turn validation episodes of session 23 (train split, five tasks, SmolLM2's chat
# template; 318 continuations): a quarter are under 30 tokens, half over 150.
OBSERVATION_TOKENS = (21, 24, 27, 69, 106, 170, 228, 254, 290, 337)
VARIANTS = {  # name -> (prefill_buckets, prefill_call_tokens)
    "padded": ((128, 512, 2048), 10**9),
    "planned_old_buckets": ((128, 512, 2048), 32),
    "planned": ((32, 128, 512), 32),
}


def workload(episodes: int, turns: int, seed: int = 0) -> tuple[list[list[int]], list[list[int]]]:
    """First prompts, and each turn's observation tokens per episode (after the first)."""
    rng = np.random.default_rng(seed)
    first = [rng.integers(0, 49152, int(rng.integers(300, 601))).tolist()
             for _ in range(episodes)]
    observations = [[rng.integers(0, 49152, int(rng.choice(OBSERVATION_TOKENS))).tolist()
                     for _ in range(turns - 1)] for _ in range(episodes)]
    return first, observations


def run_variant(model: Decoder, name: str, episodes: int, turns: int, new: int) -> dict:
    buckets, call_tokens = VARIANTS[name]
    config = EngineConfig(
        max_batch=episodes, num_pages=episodes * 3072 // 16 + 8, max_context=3072,
        prefill_buckets=buckets, prefill_call_tokens=call_tokens, max_prefill_tokens=2048,
        context_buckets=(1024, 2048), batch_buckets=(episodes,), prefix_cache=False)
    engine = SamplingEngine(model, config)
    start = time.perf_counter()
    engine.warmup()
    compile_s = time.perf_counter() - start
    first, observations = workload(episodes, turns)
    streams = [list(p) for p in first]
    params = SamplingParams(temperature=0.0, max_new_tokens=new)
    before = dict(engine.stats)
    stats_before = engine.prefill_stats()
    start = time.perf_counter()
    for turn in range(turns):
        results = engine.generate([GenerateRequest(s, params, session_id=f"ep{i}")
                                   for i, s in enumerate(streams)])
        if turn < turns - 1:
            streams = [s + r.tokens + obs[turn]
                       for s, r, obs in zip(streams, results, observations, strict=True)]
    wall = time.perf_counter() - start
    stats = engine.prefill_stats()
    tokens = stats["prefill_tokens_computed"] - stats_before["prefill_tokens_computed"]
    positions = stats["prefill_positions_computed"] - stats_before["prefill_positions_computed"]
    out = {"wall_s": wall, "compile_s": compile_s, "prefill_tokens": tokens,
           "prefill_positions": positions, "positions_per_token": positions / tokens,
           **{k: engine.stats[k] - before.get(k, 0.0)
              for k in ("prefill_seconds", "decode_seconds", "prefill_calls")}}
    print(f"{name:20s} buckets {buckets!s:18s} prefill {out['prefill_seconds']:6.1f} s in "
          f"{out['prefill_calls']:4.0f} calls, {out['positions_per_token']:.2f} positions a "
          f"token; decode {out['decode_seconds']:5.1f} s; wall {wall:6.1f} s "
          f"(warm-up {compile_s:.0f} s)", flush=True)
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--episodes", type=int, default=8)
    parser.add_argument("--turns", type=int, default=6)
    parser.add_argument("--new", type=int, default=24)
    parser.add_argument("--name", default="prefill_plan", help="benchmarks/results/NAME.json")
    args = parser.parse_args()
    compile_cache.enable()
    load_at_start = os.getloadavg()[0]
    model = Decoder(SMOLLM2_135M.replace(num_layers=args.layers), rngs=nnx.Rngs(0))
    results = {name: run_variant(model, name, args.episodes, args.turns, args.new)
               for name in VARIANTS}
    figures: dict[str, object] = {
        "layers": args.layers, "episodes": args.episodes, "turns": args.turns,
        "new_tokens": args.new, "observation_tokens": " ".join(map(str, OBSERVATION_TOKENS)),
        "load_average_at_start": load_at_start, "load_average_at_end": os.getloadavg()[0]}
    for name, r in results.items():
        figures.update({f"{name}_{k}": v for k, v in r.items()})
    for name in ("planned", "planned_old_buckets"):
        figures[f"{name}_vs_padded_prefill"] = (results["padded"]["prefill_seconds"]
                                                / results[name]["prefill_seconds"])
        figures[f"{name}_vs_padded_wall"] = results["padded"]["wall_s"] / results[name]["wall_s"]
    print(f"prefill: planned {figures['planned_vs_padded_prefill']:.2f}x faster than padded "
          f"(wall {figures['planned_vs_padded_wall']:.2f}x); the planner alone on the old buckets "
          f"{figures['planned_old_buckets_vs_padded_prefill']:.2f}x")
    print("wrote", write_result(args.name, figures))


if __name__ == "__main__":
    main()
