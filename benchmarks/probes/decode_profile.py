"""Where a decode step's time goes: the engine's compiled decode chunk under four variants.

On SmolLM2-135M (fp32, greedy, 16 steps per chunk, a 256-slot context bucket with 100 positions
cached), each variant's ms per step, timed interleaved in one run:

  as_is:    the engine's program;
  fused:    the layer's q/k/v and gate/up projections each as one matmul (weights concatenated),
            testing whether the separate small matmuls are what costs;
  ctx16:    a 16-slot context bucket instead of 256, so the attention's share shows;
  op_floor: the same 30-layer program at tiny widths (hidden 64, one head, vocabulary 512)
            and the 16-slot context: what the program's op count costs when its arithmetic and
            bytes are nearly zero. (Not at 256 slots: there this one-head, one-group config's
            context attention alone took 45 ms per step at batch 32, more than SmolLM2's
            whole attention share, before ungrouped decode scores became a dot:
            benchmarks/probes/decode_ungrouped.py.)

And the weights' ceiling (`benchmarks.sampler.weights_ceiling_tok_s`): one matmul reading all
the weights once, as ms per step.

    python -m benchmarks.probes.decode_profile [--batches 1,8,32]
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import time

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from agentrl_jax.models import decoder as decoder_lib
from agentrl_jax.models import layers as L
from agentrl_jax.models.decoder import Decoder
from agentrl_jax.models.hf_io import load_hf
from agentrl_jax.sampling import forward
from agentrl_jax.sampling import steps as steps_lib
from agentrl_jax.sampling.weights import split_layers, weights_of
from benchmarks.machine_info import write_result
from benchmarks.sampler import model_dir, weights_ceiling_tok_s

PAGE, STEPS, CACHED = 16, 16, 100


def fused_weights(w: dict) -> dict:
    def fuse(p):
        p = dict(p)
        p["qkv_proj"] = jnp.concatenate([p.pop(n) for n in ("q_proj", "k_proj", "v_proj")], 1)
        p["gate_up_proj"] = jnp.concatenate([p.pop("gate_proj"), p.pop("up_proj")], 1)
        return p

    return {**w, "layers": tuple(fuse(p) for p in w["layers"])}


def fused_block(cfg, p, x, rope, attend):
    """`decoder.block` (no biases, no sandwich norms: SmolLM2) over fused projections."""
    b, t, d = x.shape
    x = x.reshape(b * t, d)
    q, k, v = jnp.split(L.rms_norm(x, p["input_norm"], cfg.rms_norm_eps) @ p["qkv_proj"],
                        [cfg.q_dim, cfg.q_dim + cfg.kv_dim], axis=1)
    q = L.apply_rope(q.reshape(b, t, cfg.num_heads, cfg.head_dim), rope, cfg)
    k = L.apply_rope(k.reshape(b, t, cfg.num_kv_heads, cfg.head_dim), rope, cfg)
    v = v.reshape(b, t, cfg.num_kv_heads, cfg.head_dim)
    x = x + attend(q, k, v).reshape(b * t, cfg.q_dim) @ p["o_proj"]
    gate, up = jnp.split(L.rms_norm(x, p["mlp_norm"], cfg.rms_norm_eps) @ p["gate_up_proj"], 2, 1)
    return (x + (jax.nn.silu(gate) * up) @ p["down_proj"]).reshape(b, t, d)


def chunk_runner(cfg, weights, batch: int, context: int, fused: bool):
    """A closure running one decode chunk of `batch` rows (pool donated and kept)."""
    width = context // PAGE
    block = fused_block if fused else decoder_lib.block
    # compile_steps is cached by config; the fused variant needs its own trace.
    prefill_and_decode = steps_lib.compile_steps.__wrapped__(cfg, PAGE, STEPS)
    decode = prefill_and_decode[1]
    box = {"pool": forward.KVPool.zeros(cfg, (batch * width + 8) * PAGE, PAGE)}
    table = jnp.asarray(np.arange(batch * width).reshape(batch, width) + 1, jnp.int32)
    rp = steps_lib.RowParams(jnp.zeros(batch), jnp.zeros(batch, jnp.int32), jnp.ones(batch),
                             jnp.zeros(batch, jnp.uint32), -jnp.ones((batch, 1), jnp.int32))
    args = (jnp.ones(batch, jnp.int32), jnp.full(batch, CACHED, jnp.int32),
            jnp.ones(batch, bool), jnp.full(batch, 1 << 20, jnp.int32), table, rp)

    def run():
        saved, forward.block = forward.block, block  # the variant's block, at trace time
        try:
            out = decode(weights, box["pool"], *args)
        finally:
            forward.block = saved
        box["pool"] = out[0]
        jax.block_until_ready(out)

    return run


def interleaved_ms(runners: dict, repeats: int) -> dict[str, float]:
    """Median ms per decode step of each chunk runner, after one compiling call each, timed
    round-robin so that a drift in the machine's load falls on every variant alike."""
    for run in runners.values():
        run()
    times: dict[str, list[float]] = {name: [] for name in runners}
    for _ in range(repeats):
        for name, run in runners.items():
            start = time.perf_counter()
            run()
            times[name].append((time.perf_counter() - start) / STEPS * 1e3)
    return {name: statistics.median(t) for name, t in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--batches", default="1,8,32")
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    path, source = model_dir()
    model = load_hf(path)
    cfg = model.cfg
    w = split_layers(weights_of(model))
    tiny = dataclasses.replace(cfg, hidden_size=64, intermediate_size=128, num_heads=1,
                               num_kv_heads=1, vocab_size=512)
    tiny_w = split_layers(weights_of(Decoder(tiny, rngs=nnx.Rngs(0))))
    figures: dict = {"model": source, "steps_per_chunk": STEPS, "cached_positions": CACHED}
    for batch in (int(b) for b in args.batches.split(",")):
        runners = {
            "as_is": chunk_runner(cfg, w, batch, 256, fused=False),
            "fused": chunk_runner(cfg, fused_weights(w), batch, 256, fused=True),
            "ctx16": chunk_runner(cfg, w, batch, 16, fused=False),
            "op_floor": chunk_runner(tiny, tiny_w, batch, 16, fused=False),
        }
        ms = interleaved_ms(runners, args.repeats)
        ms["weights_ceiling"] = batch / weights_ceiling_tok_s(cfg, batch) * 1e3
        for name, value in ms.items():
            figures[f"b{batch}_{name}_ms"] = value
        figures[f"b{batch}_fused_vs_as_is"] = ms["fused"] / ms["as_is"]
        figures[f"b{batch}_attention_share"] = 1 - ms["ctx16"] / ms["as_is"]
        figures[f"b{batch}_op_floor_share"] = ms["op_floor"] / ms["as_is"]
        print(f"b{batch}: " + ", ".join(f"{k} {v:.1f} ms" for k, v in ms.items())
              + f"; fused/as_is {ms['fused'] / ms['as_is']:.3f}")
    print(f"wrote {write_result('decode_profile', figures)}")


if __name__ == "__main__":
    main()
