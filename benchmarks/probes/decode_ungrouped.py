"""Decode scores for models with one query per kv head: the multiply-reduce against the dot.

`sampling/forward._attend` scores a decode step's queries against the gathered context pages
with a multiply-reduce over the head dimension: the fastest form when several queries share a
kv head (SmolLM2: 3). With one query per kv head (ungrouped attention, as in Llama-2-7B or
GPT-style models) XLA CPU lowers that reduction several times slower than a dot, so such
models take the dot (`forward.DOT_DECODE_MAX_GROUPS`). This times the engine's decode chunk at
SmolLM2's widths and depth (random weights, 30 layers, fp32, 16 steps per chunk, a 256-slot
context with 100 positions cached) with 9 query heads over 9 kv heads (ungrouped) and over 3
(grouped, a control the change does not touch), each with the multiply-reduce everywhere
(`baseline`) and as shipped (`ours`), interleaved in one run.

    python -m benchmarks.probes.decode_ungrouped [--batches 1,32]
"""

from __future__ import annotations

import argparse

from flax import nnx

from agentrl_jax.models.config import ModelConfig
from agentrl_jax.models.decoder import Decoder
from agentrl_jax.sampling import forward
from agentrl_jax.sampling.weights import split_layers, weights_of
from benchmarks.machine_info import write_result
from benchmarks.probes.decode_profile import STEPS, chunk_runner, interleaved_ms

SMOLLM2_WIDTHS = dict(vocab_size=2048, hidden_size=576, intermediate_size=1536, num_layers=30,
                      num_heads=9, head_dim=64, tie_word_embeddings=True)


def traced_with(run, max_groups: int):
    """`run` with `forward.DOT_DECODE_MAX_GROUPS` set while it runs (its first call traces)."""
    def go():
        saved, forward.DOT_DECODE_MAX_GROUPS = forward.DOT_DECODE_MAX_GROUPS, max_groups
        try:
            run()
        finally:
            forward.DOT_DECODE_MAX_GROUPS = saved
    return go


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--batches", default="1,32")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    figures: dict = {"steps_per_chunk": STEPS, "context_slots": 256, **SMOLLM2_WIDTHS}
    models = {}
    for name, kv_heads in (("ungrouped", 9), ("grouped", 3)):
        cfg = ModelConfig(**SMOLLM2_WIDTHS, num_kv_heads=kv_heads)
        models[name] = (cfg, split_layers(weights_of(Decoder(cfg, rngs=nnx.Rngs(0)))))
    for batch in (int(b) for b in args.batches.split(",")):
        runners = {f"{name}_{arm}": traced_with(chunk_runner(cfg, w, batch, 256, fused=False),
                                                0 if arm == "baseline" else
                                                forward.DOT_DECODE_MAX_GROUPS)
                   for name, (cfg, w) in models.items() for arm in ("baseline", "ours")}
        ms = interleaved_ms(runners, args.repeats)
        for name, value in ms.items():
            figures[f"b{batch}_{name}_ms"] = value
        for name in models:
            figures[f"b{batch}_{name}_speedup"] = ms[f"{name}_baseline"] / ms[f"{name}_ours"]
        print(f"b{batch}: " + ", ".join(f"{k} {v:.1f} ms/step" for k, v in ms.items())
              + "; speedup " + ", ".join(f"{n} {figures[f'b{batch}_{n}_speedup']:.2f}x"
                                         for n in models))
    print(f"wrote {write_result('decode_ungrouped', figures)}")


if __name__ == "__main__":
    main()
