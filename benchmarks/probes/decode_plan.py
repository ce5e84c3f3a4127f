"""Decode in calls split by context against one call for every row (#30).

A decode call reads every row's context up to the context bucket of its longest row. In an
agent's rollouts the running episodes are at different turns, so their contexts spread from a
few hundred tokens to thousands, and one call makes each row read the longest. The engine now
splits the rows into calls by context (`sampling.decode_plan.DecodePlanner`), weighing the
context saved against a call's fixed cost (the weights read again).

Workload, as the agent loop runs it: `--slots` episodes decode at once; each plays `--turns`
turns, a reply of 8-64 tokens (greedy, no stop ids, so every variant decodes the same tokens) and
an observation of a length drawn from `prefill_plan.OBSERVATION_TOKENS` appended before the
next. An episode's next turn is submitted as soon as its reply is done, and a finished episode
makes room for a new one, `--episodes` in all, so the running contexts spread as in rollouts.
Random weights of the main job's scratch shape (`--shape scratch`) or of SmolLM2-135M's with
`--layers` layers (`--shape smollm2`).

Variants, each its own engine, warmed up (every shape compiled) before it is timed:
* `one_call`: every running row in one call (the engine before);
* `planned`: rows split by context, the call cost derived from the model's bytes (the default);
* `planned_fine_buckets`: the same with context buckets every 512 tokens up to 2,048, then 3,072.

Figures: decode seconds, calls, and context row-tokens read of each;
`planned_vs_one_call_decode` (one_call's decode seconds over planned's) and `..._wall`.

    python -m benchmarks.probes.decode_plan       # writes benchmarks/results/decode_plan.json
    python -m benchmarks.probes.decode_plan --shape smollm2 --name decode_plan_smollm2
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
from benchmarks.model_shapes import SMOLLM2_135M, scratch_default
from benchmarks.probes.prefill_plan import OBSERVATION_TOKENS

MAIN_JOB_BUCKETS = (1024, 2048)  # configs/local_default.py; max_context 4096 is added
VARIANTS = {  # name -> (context_buckets, decode_call_tokens)
    "one_call": (MAIN_JOB_BUCKETS, 10**12),
    "planned": (MAIN_JOB_BUCKETS, -1),
    "planned_fine_buckets": ((512, 1024, 1536, 2048, 3072), -1),
}
MAX_CONTEXT = 4096


def episode_plan(episodes: int, turns: int, seed: int = 0) -> list[dict]:
    """Each episode's first prompt, reply lengths and observations."""
    rng = np.random.default_rng(seed)
    return [{"prompt": rng.integers(0, 4096, int(rng.integers(300, 601))).tolist(),
             "replies": rng.integers(8, 65, turns).tolist(),
             "observations": [rng.integers(0, 4096, int(rng.choice(OBSERVATION_TOKENS))).tolist()
                              for _ in range(turns - 1)]}
            for _ in range(episodes)]


def play(engine: SamplingEngine, plan: list[dict], slots: int) -> None:
    """Runs the episodes through `engine`, `slots` at a time, each turn submitted when the
    episode's last reply is done (as the agent loop does)."""
    waiting = list(range(len(plan)))[::-1]
    streams: dict[int, list[int]] = {}
    turn_of: dict[int, int] = {}

    def start_turn(ep: int) -> None:
        params = SamplingParams(temperature=0.0, max_new_tokens=plan[ep]["replies"][turn_of[ep]])
        engine.submit(GenerateRequest(streams[ep], params, session_id=f"ep{ep}"),
                      on_done=lambda result, ep=ep: done(ep, result))

    def done(ep: int, result) -> None:
        if isinstance(result, Exception):
            raise result
        turn_of[ep] += 1
        if turn_of[ep] < len(plan[ep]["replies"]):
            streams[ep] = streams[ep] + result.tokens + plan[ep]["observations"][turn_of[ep] - 1]
            start_turn(ep)
        else:
            engine.end_session(f"ep{ep}")
            if waiting:
                begin(waiting.pop())

    def begin(ep: int) -> None:
        streams[ep], turn_of[ep] = list(plan[ep]["prompt"]), 0
        start_turn(ep)

    for _ in range(slots):
        begin(waiting.pop())
    while engine.has_work:
        engine.step()


def run_variant(model: Decoder, name: str, plan: list[dict], slots: int) -> dict:
    buckets, call_tokens = VARIANTS[name]
    config = EngineConfig(
        max_batch=slots, num_pages=slots * MAX_CONTEXT // 16 + 8, max_context=MAX_CONTEXT,
        prefill_buckets=(32, 128, 512), max_prefill_tokens=2048, context_buckets=buckets,
        batch_buckets=(4, 8, 16), decode_call_tokens=call_tokens, prefix_cache=False)
    engine = SamplingEngine(model, config)
    start = time.perf_counter()
    engine.warmup()
    compile_s = time.perf_counter() - start
    keys = ("decode_seconds", "prefill_seconds", "decode_chunks", "decode_context_tokens")
    before = {k: engine.stats[k] for k in keys}
    start = time.perf_counter()
    play(engine, plan, slots)
    wall = time.perf_counter() - start
    out = {"wall_s": wall, "compile_s": compile_s,
           **{k: engine.stats[k] - before[k] for k in keys}}
    print(f"{name:22s} buckets {buckets!s:32s} decode {out['decode_seconds']:6.1f} s in "
          f"{out['decode_chunks']:5.0f} calls, {out['decode_context_tokens'] / 1e6:6.1f}M "
          f"row-tokens of context; prefill {out['prefill_seconds']:5.1f} s; wall {wall:6.1f} s "
          f"(warm-up {compile_s:.0f} s)", flush=True)
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--shape", choices=("scratch", "smollm2"), default="scratch")
    parser.add_argument("--layers", type=int, default=8, help="smollm2: decoder layers")
    parser.add_argument("--slots", type=int, default=16)
    parser.add_argument("--episodes", type=int, default=32)
    parser.add_argument("--turns", type=int, default=8)
    parser.add_argument("--name", default="decode_plan", help="benchmarks/results/NAME.json")
    args = parser.parse_args()
    compile_cache.enable()
    load_at_start = os.getloadavg()[0]
    cfg = (scratch_default() if args.shape == "scratch"
           else SMOLLM2_135M.replace(num_layers=args.layers))
    model = Decoder(cfg, rngs=nnx.Rngs(0))
    plan = episode_plan(args.episodes, args.turns)
    results = {name: run_variant(model, name, plan, args.slots) for name in VARIANTS}
    figures: dict[str, object] = {
        "shape": args.shape, "layers": cfg.num_layers, "slots": args.slots,
        "episodes": args.episodes, "turns": args.turns,
        "load_average_at_start": load_at_start, "load_average_at_end": os.getloadavg()[0]}
    for name, r in results.items():
        figures.update({f"{name}_{k}": v for k, v in r.items()})
    one = results["one_call"]
    for name in ("planned", "planned_fine_buckets"):
        r = results[name]
        figures[f"{name}_vs_one_call_decode"] = one["decode_seconds"] / r["decode_seconds"]
        figures[f"{name}_vs_one_call_wall"] = one["wall_s"] / r["wall_s"]
        figures[f"{name}_vs_one_call_context"] = (one["decode_context_tokens"]
                                                  / r["decode_context_tokens"])
    print(f"decode: planned {figures['planned_vs_one_call_decode']:.2f}x faster than one call "
          f"(wall {figures['planned_vs_one_call_wall']:.2f}x, context read "
          f"{figures['planned_vs_one_call_context']:.2f}x less); with finer buckets "
          f"{figures['planned_fine_buckets_vs_one_call_decode']:.2f}x")
    print("wrote", write_result(args.name, figures))


if __name__ == "__main__":
    main()
