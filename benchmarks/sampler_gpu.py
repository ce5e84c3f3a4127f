"""Decode throughput on an accelerator and the fraction of HBM bandwidth it uses.

Bytes per decode step = weights read once + KV read by attention + KV written, where attention
reads every row's whole context bucket (the engine's paged attention reads the bucket width):

    bytes/step = W + B · C · kv_token + B · kv_token,    kv_token = L · 2 · kv_heads · head_dim · s

(W: weight bytes read per step, B: batch, C: context bucket, L: layers, s: bytes per element).
The fraction is bytes/step ÷ step time ÷ peak bandwidth, the peak measured in the same run by
`benchmarks.gpu_suite` (here `--peak_gbps`, default H200's 4800 GB/s datasheet figure).

    python -m benchmarks.sampler_gpu                  # SmolLM2-135M, bf16, on the default device
    python -m benchmarks.sampler_gpu --tiny           # a tiny model, runs anywhere (CPU smoke)
"""

from __future__ import annotations

import argparse
import json
import pathlib
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from agentrl_jax.models.config import ModelConfig
from agentrl_jax.models.decoder import Decoder
from agentrl_jax.sampling import EngineConfig, GenerateRequest, SamplingEngine, SamplingParams
from benchmarks.model_shapes import SMOLLM2_135M

RESULTS = pathlib.Path(__file__).parent / "results" / "sampler_gpu.json"


def weight_bytes_per_step(cfg: ModelConfig, itemsize: int) -> int:
    """Parameter bytes a decode step reads: all of them, except an untied input embedding, of
    which a step gathers only B rows (the tied one is read whole as the output projection)."""
    params = cfg.num_params()
    if not cfg.tie_word_embeddings:
        params -= cfg.vocab_size * cfg.hidden_size
    return params * itemsize


def decode_bytes_per_step(cfg: ModelConfig, batch: int, context: int, itemsize: int) -> int:
    """W + B·C·kv_token + B·kv_token (module docstring): a decode step's HBM traffic."""
    kv_token = cfg.num_layers * 2 * cfg.num_kv_heads * cfg.head_dim * itemsize
    return weight_bytes_per_step(cfg, itemsize) + batch * context * kv_token + batch * kv_token


def measure_decode(model: Decoder, batches: Sequence[int], prompt: int, new: int,
                   steps_per_sync: int = 32) -> dict[int, dict]:
    """Greedy decode of `batch` random `prompt`-token prompts for `new` tokens each, per batch.

    One engine serves every batch size (a decode bucket each), so its shapes compile once.
    Returns, per batch: decode tokens/s (the tokens after the first, which prefill yields, over
    the engine's decode time, which ends by fetching tokens to the host, so it is device time),
    the time per executed decode step, and the step's bytes and achieved GB/s.
    """
    cfg = model.cfg
    context = -(-(prompt + new) // 128) * 128
    largest = max(batches)
    engine = SamplingEngine(model, EngineConfig(
        max_batch=largest, page_size=16, num_pages=largest * context // 16 + 8,
        max_context=context, prefill_buckets=(prompt,), prefill_batch_buckets=(min(largest, 32),),
        context_buckets=(context,), batch_buckets=tuple(batches), steps_per_sync=steps_per_sync,
    ))
    engine.warmup()
    itemsize = jnp.dtype(cfg.dtype).itemsize
    results = {}
    for batch in batches:
        rng = np.random.default_rng(batch)
        requests = [GenerateRequest(rng.integers(0, cfg.vocab_size, prompt).tolist(),
                                    SamplingParams(temperature=0.0, max_new_tokens=new))
                    for _ in range(batch)]
        engine.generate(requests[:1])  # first-call overheads
        before = dict(engine.stats)
        engine.generate(requests)
        decode_s = engine.stats["decode_seconds"] - before["decode_seconds"]
        steps = (engine.stats["decode_chunks"] - before["decode_chunks"]) * steps_per_sync
        step_s = decode_s / steps
        bytes_per_step = decode_bytes_per_step(cfg, batch, context, itemsize)
        results[batch] = {
            "decode_tok_s": batch * (new - 1) / decode_s, "step_ms": step_s * 1e3,
            "decode_steps": steps, "context_bucket": context, "bytes_per_step": bytes_per_step,
            "achieved_gbps": bytes_per_step / step_s / 1e9,
        }
    return results


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--tiny", action="store_true", help="tiny model and sizes (CPU smoke)")
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--prompt", type=int, default=128)
    parser.add_argument("--new", type=int, default=257)
    parser.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float32"])
    parser.add_argument("--peak_gbps", type=float, default=4800.0)
    parser.add_argument("--zoo", action="store_true", help="real SmolLM2 weights from the zoo")
    parser.add_argument("--out", default=str(RESULTS))
    args = parser.parse_args()
    dtype = jnp.dtype(args.dtype)
    if args.tiny:
        cfg = ModelConfig.tiny("llama", dtype=dtype, param_dtype=dtype)
        args.batch, args.prompt, args.new = min(args.batch, 8), 16, 33
    else:
        cfg = SMOLLM2_135M.replace(dtype=dtype, param_dtype=dtype)
    if args.zoo and not args.tiny:
        from agentrl_jax.models.hf_io import load_hf
        from agentrl_jax.models.zoo import resolve_model_dir

        model = load_hf(resolve_model_dir("smollm2-135m-instruct"), dtype=dtype,
                        param_dtype=dtype)
    else:
        model = Decoder(cfg, rngs=nnx.Rngs(0))
    figures = measure_decode(model, [args.batch], args.prompt, args.new)[args.batch]
    out = {
        "device": str(jax.devices()[0].device_kind), "backend": jax.default_backend(),
        "model": "tiny" if args.tiny else "smollm2-135m shape", "dtype": args.dtype,
        "batch": args.batch, "prompt": args.prompt, "new_tokens": args.new, **figures,
        "peak_gbps": args.peak_gbps,
        "hbm_bandwidth_fraction": figures["achieved_gbps"] / args.peak_gbps,
        "jax": jax.__version__,
    }
    print(json.dumps(out, indent=2))
    pathlib.Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    pathlib.Path(args.out).write_text(json.dumps(out, indent=2) + "\n")


if __name__ == "__main__":
    main()
