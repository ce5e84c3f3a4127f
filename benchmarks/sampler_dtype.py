"""The sampler in bf16 against fp32: prefill and decode rates by rows per call, same run.

    python -m benchmarks.sampler_dtype                  # batches 1, 8, 32, best of 2
    python -m benchmarks.sampler_dtype --batches 4,16 --repeats 3

SmolLM2-135M-Instruct (its real weights from the zoo, or random ones of its shape), one engine
per dtype (`EngineConfig.compute_dtype`), each warmed up; then per batch B: B prompts of
`--prompt` random tokens prefilled together, and `--new` tokens decoded greedily with no stop
(so every row decodes them all). The engine's own split of the time (`stats`) gives the prefill
rate (positions/s) and the decode rate (tokens/s); each figure is the best of `--repeats`
alternated passes, so load changes on a shared machine hit both dtypes alike.

Writes benchmarks/results/sampler_dtype.json: `prefill_bB_{fp32,bf16}_tok_s`,
`decode_bB_{fp32,bf16}_tok_s` and the ratios `prefill_bB_bf16_vs_fp32`,
`decode_bB_bf16_vs_fp32`, plus the host's dot rates (`machine_info`), since the answer depends
on whether the CPU runs bf16 products natively (AVX512-BF16, AMX) and how fast.
"""

from __future__ import annotations

import argparse

import numpy as np

from agentrl_jax.models import hf_io
from agentrl_jax.sampling import EngineConfig, GenerateRequest, SamplingEngine, SamplingParams
from benchmarks.machine_info import write_result
from benchmarks.sampler import model_dir

DTYPES = {"fp32": None, "bf16": "bfloat16"}


def engine_for(model, batch: int, prompt: int, new: int, dtype: str | None) -> SamplingEngine:
    page = 16
    context = -(-(prompt + new) // page) * page
    cfg = EngineConfig(max_batch=batch, page_size=page,
                       num_pages=batch * context // page + 8, max_context=context,
                       prefill_buckets=(prompt,), prefill_batch_buckets=(batch,),
                       context_buckets=(context,), batch_buckets=(batch,), steps_per_sync=8,
                       prefix_cache=False, compute_dtype=dtype)
    engine = SamplingEngine(model, cfg)
    engine.warmup()
    return engine


def one_pass(engine: SamplingEngine, prompts: list[list[int]], new: int) -> tuple[float, float]:
    """(prefill positions/s, decode tokens/s) of generating `new` tokens for each prompt."""
    before = dict(engine.stats)
    forced = SamplingParams(temperature=0.0, max_new_tokens=new)
    results = engine.generate([GenerateRequest(p, forced) for p in prompts])
    assert all(len(r.tokens) == new for r in results)
    prefill_s = engine.stats["prefill_seconds"] - before.get("prefill_seconds", 0.0)
    decode_s = engine.stats["decode_seconds"] - before.get("decode_seconds", 0.0)
    rows = len(prompts)
    return rows * len(prompts[0]) / prefill_s, rows * (new - 1) / decode_s


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--batches", default="1,8,32")
    parser.add_argument("--prompt", type=int, default=256)
    parser.add_argument("--new", type=int, default=65)
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    path, source = model_dir()
    model = hf_io.load_hf(path)
    print(f"model: {source}")
    figures: dict[str, float | str] = {"model": source, "prompt_tokens": args.prompt,
                                       "new_tokens": args.new}
    rng = np.random.default_rng(0)
    for batch in (int(b) for b in args.batches.split(",")):
        engines = {name: engine_for(model, batch, args.prompt, args.new, dtype)
                   for name, dtype in DTYPES.items()}
        best: dict[str, list[float]] = {name: [0.0, 0.0] for name in DTYPES}
        for _ in range(args.repeats):
            for name, engine in engines.items():
                prompts = rng.integers(0, model.cfg.vocab_size, (batch, args.prompt)).tolist()
                rates = one_pass(engine, prompts, args.new)
                best[name] = [max(a, b) for a, b in zip(best[name], rates, strict=True)]
        for i, phase in enumerate(("prefill", "decode")):
            for name in DTYPES:
                figures[f"{phase}_b{batch}_{name}_tok_s"] = round(best[name][i], 2)
            ratio = best["bf16"][i] / best["fp32"][i]
            figures[f"{phase}_b{batch}_bf16_vs_fp32"] = round(ratio, 3)
            print(f"{phase:8s} b{batch:<3d} fp32 {best['fp32'][i]:9.1f} tok/s   bf16 "
                  f"{best['bf16'][i]:9.1f} tok/s   bf16/fp32 {ratio:.2f}")
        del engines
    out = write_result("sampler_dtype", figures)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
