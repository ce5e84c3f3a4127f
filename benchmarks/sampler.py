"""Sampling engine throughput against baselines measured in the same process (issue #3).

(a) decode: ours vs HF transformers `generate` on SmolLM2-135M-Instruct (same weights, CPU, fp32),
    batch 1 / 8 / 32, 128-token prompts, 128 new tokens forced (greedy, no stop tokens). Both
    timings are whole `generate` calls (prefill + decode). Where Tunix's environment exists
    (`scripts/setup_tunix.sh`: `.venv-tunix`, or `$AGENTRL_JAX_TUNIX_PYTHON`), Tunix's sampler
    runs the same prompts on the same weights in a subprocess (`benchmarks/tunix_generate.py`)
    and `decode_vs_tunix_bB` is the ratio; otherwise the run says it skipped Tunix.
    `decode_vs_weights_ceiling_bB`: ours against one matmul of the batch with all the weights
    (`weights_ceiling_tok_s`), the bound that memory bandwidth or FLOPs put on any sampler.
(b) multi-turn: episodes of 8 turns, each appending 128 environment tokens and generating 64;
    sessions kept across turns (KV reuse) against re-prefilling the whole stream every turn;
    `multiturn_ceiling_free_prefill` is the ratio if the reuse run's prefill cost nothing
    (both runs decode the same tokens at the same contexts).
(c) continuous vs static batching: 64 requests with output lengths 16..256 through the same
    number of decode slots; static batching runs each batch of `slots` requests until its
    longest member finishes (as HF `generate` on a batch does).
(d) shared prefixes (issue #18): an AgentRL-shaped first turn, 5 tasks × 4 groups × G = 8
    episodes, each prompt the task's real system prompt and tools rendered with SmolLM2's
    template plus the group's task-specific user message, 64 new tokens each; the engine with
    the prefix cache against the same engine without it (`prefix_reuse_vs_none`), and the share
    of prefill tokens the cache saved (`prefill_tokens_saved_frac`).

    python -m benchmarks.sampler                # writes benchmarks/results/sampler.json
    python -m benchmarks.sampler --quick        # smaller sizes, a smoke run
    python -m benchmarks.sampler --only prefix  # one workload; merged into the existing JSON

Timings are wall clock on a possibly shared machine: the JSON records the load average.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import platform
import subprocess
import tempfile
import time

import jax
import numpy as np

from agentrl_jax.models.config import ModelConfig
from agentrl_jax.models.decoder import Decoder
from agentrl_jax.models.hf_io import load_hf, save_hf
from agentrl_jax.sampling import EngineConfig, GenerateRequest, SamplingEngine, SamplingParams
from benchmarks.model_shapes import SMOLLM2_135M

RESULTS = pathlib.Path(__file__).parent / "results" / "sampler.json"


def model_dir() -> tuple[pathlib.Path, str]:
    """SmolLM2-135M-Instruct from the zoo, or random weights of its shape if unavailable."""
    try:
        from agentrl_jax.models.zoo import resolve_model_dir

        return resolve_model_dir("smollm2-135m-instruct"), "smollm2-135m-instruct (zoo)"
    except Exception as e:  # noqa: BLE001 - any failure falls back to same-shape random weights
        print(f"zoo unavailable ({e!r}); using random weights of SmolLM2-135M's shape")
        from flax import nnx

        path = pathlib.Path(tempfile.mkdtemp()) / "smollm2-random"
        save_hf(Decoder(SMOLLM2_135M, rngs=nnx.Rngs(0)), path)
        return path, "random weights, SmolLM2-135M shape"


COMPILES: list[float] = []  # backend compile durations, from a jax.monitoring listener
TIMED_COMPILES = [0]  # compilations that happened inside timed sections (should stay 0)


def timed(fn) -> float:
    before = len(COMPILES)
    start = time.perf_counter()
    fn()
    elapsed = time.perf_counter() - start
    TIMED_COMPILES[0] += len(COMPILES) - before
    return elapsed


def weights_ceiling_tok_s(cfg: ModelConfig, batch: int, repeats: int = 5) -> float:
    """Tokens/s if a decode step cost only one matmul of `batch` rows with all the model's
    weights at once ([batch, hidden] @ [hidden, N / hidden], the same bytes, in one XLA dot):
    what streaming the weights (at batch 1) or their FLOPs (at batch) allow on this machine.
    Every real step does at least this and more (30 layers' smaller matmuls, attention over the
    KV, sampling), so no sampler on these weights in this dtype can beat it."""
    import jax.numpy as jnp

    w = jnp.ones((cfg.hidden_size, cfg.num_params() // cfg.hidden_size), jnp.float32)
    x = jnp.ones((batch, cfg.hidden_size), jnp.float32)
    matmul = jax.jit(jnp.matmul)
    matmul(x, w).block_until_ready()
    return batch / min(timed(lambda: matmul(x, w).block_until_ready()) for _ in range(repeats))


def prompts(n: int, length: int, vocab: int, seed: int) -> list[list[int]]:
    return np.random.default_rng(seed).integers(0, vocab, (n, length)).tolist()


def load_hf_baseline(path: pathlib.Path):
    """HF's model with whichever attention implementation and torch thread count decode fastest.

    On a loaded machine OpenMP kernels can degrade badly with more threads than free cores, and
    on some torch CPU builds SDPA's kernel is slower for one query than eager attention; the
    baseline should be HF at its best, so all four are probed (and the JSON says which won).
    """
    import torch
    import transformers

    best = None
    x = torch.randint(0, 1000, (1, 64))
    kw = dict(do_sample=False, max_new_tokens=16, min_new_tokens=16, pad_token_id=0,
              attention_mask=torch.ones_like(x))
    for impl in ("sdpa", "eager"):
        m = transformers.AutoModelForCausalLM.from_pretrained(
            path, dtype=torch.float32, attn_implementation=impl).eval()
        for threads in sorted({1, os.cpu_count() or 1}):
            torch.set_num_threads(threads)
            with torch.no_grad():
                m.generate(x, **{**kw, "max_new_tokens": 2, "min_new_tokens": 2})
                t = min(timed(lambda m=m: m.generate(x, **kw)) for _ in range(2))
            print(f"HF attention {impl}, {threads} threads: {16 / t:.1f} tok/s at batch 1")
            if best is None or t < best[0]:
                best = (t, m, {"attention": impl, "torch_threads": threads})
    torch.set_num_threads(best[2]["torch_threads"])
    return best[1], best[2]


def tunix_python() -> pathlib.Path | None:
    """Tunix's interpreter (`$AGENTRL_JAX_TUNIX_PYTHON`, else `.venv-tunix`), if it has Tunix."""
    default = pathlib.Path(__file__).resolve().parent.parent / ".venv-tunix" / "bin" / "python"
    path = pathlib.Path(os.environ.get("AGENTRL_JAX_TUNIX_PYTHON") or default)
    if not path.exists():
        return None
    found = subprocess.run([str(path), "-c", "import tunix.generate.sampler"],
                           capture_output=True, check=False)
    return path if found.returncode == 0 else None


def tunix_generate(python: pathlib.Path, path: pathlib.Path, ps: list[list[int]],
                   new: int) -> dict:
    """Tunix's whole generate call on `ps` (`benchmarks/tunix_generate.py`, its own process)."""
    with tempfile.NamedTemporaryFile("w", suffix=".json") as request:
        json.dump({"model_dir": str(path), "prompts": ps, "new_tokens": new}, request)
        request.flush()
        env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
        done = subprocess.run([str(python), str(pathlib.Path(__file__).with_name(
            "tunix_generate.py")), request.name], capture_output=True, text=True, env=env,
            check=False)
    if done.returncode != 0:
        raise RuntimeError(f"Tunix's sampler failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def bench_decode(model, hf_model, batch: int, prompt_len: int, new: int,
                 tunix: tuple[pathlib.Path, pathlib.Path] | None = None) -> dict:
    """Ours against HF (and Tunix, with `tunix` = (its python, the model dir)) at `batch`."""
    import torch

    cfg = EngineConfig(
        max_batch=batch, page_size=16, num_pages=batch * (prompt_len + new) // 16 + 8,
        max_context=prompt_len + new, prefill_buckets=(prompt_len,),
        prefill_batch_buckets=(min(batch, 8),), context_buckets=(prompt_len + new,),
        batch_buckets=(batch,), steps_per_sync=16,
    )
    engine = SamplingEngine(model, cfg)
    ps = prompts(batch, prompt_len, model.cfg.vocab_size, seed=batch)
    forced = SamplingParams(temperature=0.0, max_new_tokens=new)
    requests = [GenerateRequest(p, forced) for p in ps]
    engine.warmup()
    # First-call overheads, on another prompt (the prefix cache, on here, would serve a copy).
    engine.generate([GenerateRequest([1] * prompt_len, forced)])
    inputs = torch.tensor(ps)
    kwargs = dict(do_sample=False, max_new_tokens=new, min_new_tokens=new, pad_token_id=0,
                  attention_mask=torch.ones_like(inputs))
    with torch.no_grad():
        hf_model.generate(inputs[:, :8], **{**kwargs, "max_new_tokens": 4, "min_new_tokens": 4,
                                             "attention_mask": torch.ones_like(inputs[:, :8])})
    # Alternate the two so that load changes on a shared machine hit both alike.
    ours_t, hf_t = [], []
    for _ in range(1):
        ours_t.append(timed(lambda: engine.generate(requests)))
        with torch.no_grad():
            hf_t.append(timed(lambda: hf_model.generate(inputs, **kwargs)))
    ours, hf = batch * new / min(ours_t), batch * new / min(hf_t)
    print(f"decode b{batch}: ours {ours:.1f} tok/s, HF {hf:.1f} tok/s, ratio {ours / hf:.2f}")
    ceiling = weights_ceiling_tok_s(model.cfg, batch)
    print(f"decode b{batch}: one matmul over all the weights allows {ceiling:.1f} tok/s; ours is "
          f"{ours / ceiling:.0%} of it")
    result = {"ours_tok_s": ours, "hf_tok_s": hf, "ratio": ours / hf,
              "weights_ceiling_tok_s": ceiling, "vs_weights_ceiling": ours / ceiling}
    if tunix is not None:
        theirs = tunix_generate(*tunix, ps, new)
        mine = [r.tokens for r in engine.generate(requests)]
        # Same weights, greedy: the share of rows whose first 16 tokens agree says so.
        agree = float(np.mean([list(a[:16]) == list(b[:16])
                               for a, b in zip(mine, theirs["tokens"], strict=True)]))
        result.update(tunix_tok_s=theirs["tok_s"], vs_tunix=ours / theirs["tok_s"],
                      tunix_rows_agree_16=agree, tunix_version=theirs["tunix_version"])
        print(f"decode b{batch}: Tunix {theirs['tok_s']:.1f} tok/s, ours/Tunix "
              f"{ours / theirs['tok_s']:.2f} (first 16 tokens agree on {agree:.0%} of rows)")
    return result


def bench_multiturn(model, episodes: int, turns: int, env_tokens: int, new: int) -> dict:
    max_context = -(-(env_tokens + turns * (env_tokens + new)) // 256) * 256
    cfg = EngineConfig(
        max_batch=episodes, page_size=16, num_pages=episodes * max_context // 16 + 8,
        # A turn appends the last generated token + the environment's reply: 129 → 144 (the
        # first turn's 128 too). A re-prefill goes in chunks of 512 (the largest bucket).
        # Decode reads the whole context bucket, so the buckets are 256 apart.
        max_context=max_context, prefill_buckets=(env_tokens + 16, 512),
        prefill_batch_buckets=(episodes,),
        context_buckets=tuple(range(256, max_context, 256)),
        batch_buckets=(episodes,), steps_per_sync=16,
        prefix_cache=False,  # the re-prefill run must recompute (the cache would not)
    )
    forced = SamplingParams(temperature=0.0, max_new_tokens=new)
    vocab = model.cfg.vocab_size

    def run(engine, reuse: bool) -> float:
        rng = np.random.default_rng(0)
        streams = rng.integers(0, vocab, (episodes, env_tokens)).tolist()
        start = time.perf_counter()
        for _ in range(turns):
            results = engine.generate([
                GenerateRequest(s, forced, session_id=f"ep{i}" if reuse else None)
                for i, s in enumerate(streams)])
            streams = [s + r.tokens + rng.integers(0, vocab, env_tokens).tolist()
                       for s, r in zip(streams, results, strict=True)]
        elapsed = time.perf_counter() - start
        for i in range(episodes):
            engine.end_session(f"ep{i}")
        return elapsed

    def phases(reuse: bool) -> tuple[float, float, float]:
        """(wall, prefill, decode) seconds of one run, the split from the engine's stats."""
        before = dict(engine.stats)
        wall = timed(lambda: run(engine, reuse))
        prefill, decode = (engine.stats[k] - before.get(k, 0.0)
                           for k in ("prefill_seconds", "decode_seconds"))
        return wall, prefill, decode

    engine = SamplingEngine(model, cfg)
    engine.warmup()
    reuse, reuse_prefill, reuse_decode = phases(True)
    reprefill, reprefill_prefill, _ = phases(False)
    # Both runs decode the same tokens at the same contexts, so with prefill free the ratio
    # could reach reprefill / decode and no further: the workload's ceiling on this machine.
    ceiling = reprefill / reuse_decode
    print(f"multi-turn ({episodes} episodes × {turns} turns): reuse {reuse:.1f} s "
          f"(prefill {reuse_prefill:.1f}, decode {reuse_decode:.1f}), re-prefill {reprefill:.1f} s "
          f"(prefill {reprefill_prefill:.1f}), ratio {reprefill / reuse:.2f}, "
          f"ceiling with free prefill {ceiling:.2f}")
    return {"reuse_s": reuse, "reprefill_s": reprefill, "ratio": reprefill / reuse,
            "reuse_prefill_s": reuse_prefill, "reuse_decode_s": reuse_decode,
            "reprefill_prefill_s": reprefill_prefill, "ceiling_free_prefill": ceiling,
            "episodes": episodes, "turns": turns, "env_tokens": env_tokens, "new_tokens": new}


def bench_continuous(model, requests: int, slots: int, prompt_len: int, lengths: tuple) -> dict:
    rng = np.random.default_rng(0)
    outs = rng.integers(lengths[0], lengths[1] + 1, requests).tolist()
    ps = prompts(requests, prompt_len, model.cfg.vocab_size, seed=1)
    max_context = -(-(prompt_len + lengths[1]) // 64) * 64
    cfg = EngineConfig(
        max_batch=slots, page_size=16, num_pages=slots * max_context // 16 + 8,
        # Fine row buckets: prefill rounds admit a few prompts at a time (padding them to 4
        # rows doubled the prefill work), and decode runs ~14 of 16 slots on average.
        max_context=max_context, prefill_buckets=(prompt_len,), context_buckets=(128, 256),
        prefill_batch_buckets=(1, 2, 4, 8), batch_buckets=(1, 2, 4, 8, 10, 12, 14),
        steps_per_sync=8,
        prefix_cache=False,  # static batching reruns the same prompts: no cache between
    )
    engine = SamplingEngine(model, cfg)
    engine.warmup()

    def continuous():
        engine.generate([GenerateRequest(p, SamplingParams(temperature=0.0, max_new_tokens=n))
                         for p, n in zip(ps, outs, strict=True)])

    def static():
        for i in range(0, requests, slots):
            longest = max(outs[i : i + slots])
            engine.generate([GenerateRequest(p, SamplingParams(temperature=0.0,
                                                               max_new_tokens=longest))
                             for p in ps[i : i + slots]])

    t_cont, t_static = timed(continuous), timed(static)
    useful = sum(outs)
    print(f"continuous {useful / t_cont:.1f} useful tok/s, static {useful / t_static:.1f}, "
          f"ratio {t_static / t_cont:.2f}")
    return {"continuous_s": t_cont, "static_s": t_static, "ratio": t_static / t_cont,
            "requests": requests, "slots": slots, "output_lengths": list(lengths)}


def agentbench_first_prompts(tokenizer, groups: int) -> dict[str, list[list[int]]]:
    """Per task, `groups` first prompts: the task's own system prompt and tool schema (as its
    environment sends them) and a task-specific user message (from the AgentBench data in
    ../shared/data where there is some), rendered with the tokenizer's chat template."""
    from agentrl_jax.chat.templates import render
    from environments.alfworld import task as alfworld
    from environments.db import task as db
    from environments.kg import prompts as kg
    from environments.os_interaction import task as os_task
    from environments.webshop import task as webshop

    data = pathlib.Path(__file__).resolve().parents[1] / ".." / "shared" / "data" / "agentbench"

    def rows(path: str, default: list) -> list:
        try:
            text = (data / path).read_text()
        except OSError:
            return default
        return ([json.loads(line) for line in text.splitlines()[:groups]]
                if path.endswith(".jsonl") else json.loads(text)[:groups])

    goals = ["put a clean mug in coffeemachine", "heat some egg and put it in garbagecan",
             "look at the bowl under the desklamp", "put two cellphones in the drawer"]
    products = ["a pack of 12 green tea bags under 20 dollars", "noise cancelling headphones",
                "a women's rain jacket in size medium", "unscented hand soap, 3 pack"]
    db_rows = rows("dbbench/dev.jsonl", [{"description": f"How many rows are there in t{i}?"}
                                         for i in range(groups)])
    os_rows = rows("os_interaction/dev.json", [{"description": f"Count the files in /tmp/{i}."}
                                               for i in range(groups)])
    kg_rows = rows("knowledgegraph/dev.json", [{"question": f"who wrote book {i}?",
                                                "entities": {f"book {i}": "m.0"}}
                                               for i in range(groups)])
    tasks = {
        "alfworld": (alfworld.SYSTEM_PROMPT, [alfworld.TAKE_ACTION_TOOL],
                     [f"Here is your task. You are in the middle of a room. Looking quickly "
                      f"around you, you see a cabinet 1, a countertop 1, a drawer 1, a fridge "
                      f"1 and a sinkbasin 1.\nYour task is to: {g}." for g in goals]),
        "db": (db.SYSTEM_PROMPT, db.TOOLS, [db.user_prompt(e) for e in db_rows]),
        "kg": (kg.INSTRUCTIONS.format(max_round=15), kg.TOOLS,
               [f"{e['question']}\nEntities: [{', '.join(e['entities'])}]" for e in kg_rows]),
        "os": (os_task.SYSTEM_PROMPT, os_task.TOOLS,
               [os_task.PROBLEM_PREFIX + e["description"] for e in os_rows]),
        "webshop": (webshop.SYSTEM_PROMPT, webshop.TOOLS,
                    [f"The initial observation:\nWebShop [SEP] Instruction: [SEP] i need {p}"
                     "\n\nAvailable Actions:\nhas_search_bar: True" for p in products]),
    }
    out = {}
    for name, (system, tools, users) in tasks.items():
        out[name] = [tokenizer.encode(render(
            tokenizer, [{"role": "system", "content": system}, {"role": "user", "content": u}],
            tools, add_generation_prompt=True)) for u in users[:groups]]
    return out


def bench_prefix(model, path: pathlib.Path, tasks: int, groups: int, group_size: int,
                 new: int) -> dict:
    """The first turn of `tasks × groups × group_size` episodes, prefix cache off vs on."""
    import transformers

    tokenizer = transformers.AutoTokenizer.from_pretrained(path)
    by_task = dict(list(agentbench_first_prompts(tokenizer, groups).items())[:tasks])
    # Episodes arrive group by group, the G members of a group together (AgentRL's rollout
    # workers start a group's episodes at once).
    episodes = [(f"{task}/{g}/{m}", prompt) for task, prompts in by_task.items()
                for g, prompt in enumerate(prompts) for m in range(group_size)]
    lengths = [len(p) for _, p in episodes]
    page, slots = 16, 32
    max_context = -(-(max(lengths) + new) // 512) * 512
    # The pool fits `slots` requests of the mean size (both runs get the same pool).
    num_pages = slots * (sum(lengths) // len(lengths) + new) // page + 8
    forced = SamplingParams(temperature=0.0, max_new_tokens=new)

    def run(prefix_cache: bool) -> tuple[float, dict]:
        engine = SamplingEngine(model, EngineConfig(
            max_batch=slots, page_size=page, num_pages=num_pages, max_context=max_context,
            # Short buckets and single rows too: with the cache, a group's first member
            # prefills alone and the others only the tail of a page (padding them to 8 rows
            # of 512 tokens cost as much as the prefills saved).
            prefill_buckets=(32, 128, 512), prefill_batch_buckets=(1, 8),
            context_buckets=tuple(range(512, max_context, 512)), batch_buckets=(8, 16),
            steps_per_sync=16, prefix_cache=prefix_cache))
        engine.warmup()  # compiles once: the second engine has the same shapes
        requests = [GenerateRequest(p, forced, session_id=sid) for sid, p in episodes]
        wall = timed(lambda: engine.generate(requests))
        return wall, {**engine.prefill_stats(), "prefill_s": engine.stats["prefill_seconds"],
                      "decode_s": engine.stats["decode_seconds"]}

    off, off_stats = run(False)
    on, on_stats = run(True)
    saved = 1 - on_stats["prefill_tokens_computed"] / on_stats["prefill_tokens_requested"]
    print(f"prefix ({len(by_task)} tasks × {groups} groups × G={group_size}, prompts "
          f"{min(lengths)}..{max(lengths)} tokens): no cache {off:.1f} s, cache {on:.1f} s, ratio "
          f"{off / on:.2f}, prefill tokens saved {saved:.3f}")
    return {"none_s": off, "cache_s": on, "ratio": off / on, "prefill_tokens_saved_frac": saved,
            "prefill_tokens_requested": on_stats["prefill_tokens_requested"],
            "prefill_tokens_computed": on_stats["prefill_tokens_computed"],
            "prefill_tokens_computed_without": off_stats["prefill_tokens_computed"],
            "none_prefill_s": off_stats["prefill_s"], "none_decode_s": off_stats["decode_s"],
            "cache_prefill_s": on_stats["prefill_s"], "cache_decode_s": on_stats["decode_s"],
            "episodes": len(episodes), "tasks": len(by_task), "groups_per_task": groups,
            "group_size": group_size, "new_tokens": new,
            "prompt_tokens_min": min(lengths), "prompt_tokens_max": max(lengths)}


def machine() -> dict:
    import flax
    import torch
    import transformers

    cpu = platform.processor()
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "cpu": cpu, "cores": os.cpu_count(), "platform": platform.platform(),
        "load_average_at_start": os.getloadavg(), "backend": jax.default_backend(),
        "versions": {"jax": jax.__version__, "flax": flax.__version__,
                     "torch": torch.__version__, "transformers": transformers.__version__,
                     "numpy": np.__version__},
    }


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="small sizes, a smoke run")
    parser.add_argument("--batches", default="1,8,32")
    parser.add_argument("--parts", default="decode,multiturn,continuous,prefix",
                        help="comma-separated subset of decode,multiturn,continuous,prefix")
    parser.add_argument("--only", default=None,
                        help="run one part and merge its keys into the existing --out JSON")
    parser.add_argument("--out", default=str(RESULTS))
    args = parser.parse_args()
    if args.only:
        args.parts = args.only

    info = machine()
    path, source = model_dir()
    model = load_hf(path)
    parts = set(args.parts.split(","))
    hf_model, hf_attention = load_hf_baseline(path) if "decode" in parts else (None, None)
    jax.monitoring.register_event_duration_secs_listener(
        lambda event, secs, **_: COMPILES.append(secs)
        if event == "/jax/core/compile/backend_compile_duration" else None)
    q = args.quick
    prompt_len, new = (32, 16) if q else (128, 128)
    out: dict = {"model": source, "machine": info}
    if hf_attention is not None:
        out["hf_baseline"] = hf_attention
    if "decode" in parts:
        python = tunix_python()
        if python is None:
            print("Tunix skipped: no .venv-tunix with Tunix (scripts/setup_tunix.sh makes one)")
        for b in (int(x) for x in args.batches.split(",")):
            r = bench_decode(model, hf_model, b, prompt_len, new,
                             tunix=None if python is None else (python, path))
            out[f"decode_b{b}"] = r
            out[f"decode_vs_hf_b{b}"] = r["ratio"]
            out[f"decode_vs_weights_ceiling_b{b}"] = r["vs_weights_ceiling"]
            if "vs_tunix" in r:
                out[f"decode_vs_tunix_b{b}"] = r["vs_tunix"]
    del hf_model
    if "multiturn" in parts:
        mt = bench_multiturn(model, episodes=2 if q else 8, turns=3 if q else 8,
                             env_tokens=32 if q else 128, new=16 if q else 64)
        out["multiturn"], out["multiturn_reuse_vs_reprefill"] = mt, mt["ratio"]
        out["multiturn_ceiling_free_prefill"] = mt["ceiling_free_prefill"]
    if "continuous" in parts:
        cb = bench_continuous(model, requests=16 if q else 64, slots=8 if q else 16,
                              prompt_len=32, lengths=(4, 32) if q else (16, 256))
        out["continuous"], out["continuous_vs_static"] = cb, cb["ratio"]
    if "prefix" in parts:
        pr = bench_prefix(model, path, tasks=2 if q else 5, groups=2 if q else 4,
                          group_size=4 if q else 8, new=16 if q else 64)
        out["prefix"], out["prefix_reuse_vs_none"] = pr, pr["ratio"]
        out["prefill_tokens_saved_frac"] = pr["prefill_tokens_saved_frac"]
    out["compilations_total"] = len(COMPILES)
    out["compile_seconds_total"] = sum(COMPILES)
    out["compilations_while_timing"] = TIMED_COMPILES[0]
    if args.only:  # one part's keys (and its machine) into the full run's file
        old = json.loads(pathlib.Path(args.out).read_text()) if pathlib.Path(args.out).exists() \
            else {}
        part_keys = {k: v for k, v in out.items() if k not in ("model", "machine")}
        out = {**old, **{k: v for k, v in part_keys.items() if not k.startswith("compil")},
               f"machine_{args.only}": info}
    pathlib.Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    pathlib.Path(args.out).write_text(json.dumps(out, indent=2) + "\n")
    print(json.dumps({k: v for k, v in out.items() if not isinstance(v, dict)}, indent=2))


if __name__ == "__main__":
    main()
