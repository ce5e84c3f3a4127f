"""The training attention's backward pass: FlashAttention's, against autodiff, in a train step.

`layers.block_causal_attention` differentiates by FlashAttention's rule (`_block_attention_bwd`):
the forward keeps each row's log-sum-exp and the output, the backward rebuilds the probabilities
in one pass over the scores and never reduces over them. The baseline (`autodiff`, below) is the
same blocked forward differentiated by JAX, as the trainer did before: under the decoder's
checkpoint policy its backward recomputes the whole softmax (max, exponentials, sum,
normalisation, the masks' selects) and then runs the softmax's own backward over the scores.

One policy-gradient train step (`rl.train_step.Trainer`: forward, backward, AdamW), fp32, the
SmolLM2-135M shape at `--layers` layers (its whole vocabulary) or the main job's scratch shape
(`--shape scratch`, 4 layers of width 256: attention is a larger share of it), on random
weights and tokens,
one micro-batch of `--tokens` tokens cut into rows of each `--lengths` length: the attention's
cost grows with the row, the rest does not. Each (variant, length) runs in its own process, one
after the other, so each peak RSS is its own. Reported per pair: seconds per step (median of
`--steps` after the first), the first step (compilation included), peak RSS, and
`step_speedup_<length>` = autodiff / ours, the same run.

    python -m benchmarks.probes.attention_grad [--shape smollm2] [--layers 8] [--lengths 2048,4096]
"""

from __future__ import annotations

import argparse
import json
import math
import resource
import statistics
import subprocess
import sys
import time

import numpy as np

VARIANTS = ("autodiff", "flash")


def model_config(shape: str, layers: int):
    from benchmarks.model_shapes import SMOLLM2_135M, scratch_default

    return scratch_default() if shape == "scratch" else SMOLLM2_135M.replace(num_layers=layers)


def autodiff_block_attention(q, k, v, masks):
    """`layers.block_causal_attention`'s forward, left to autodiff (the baseline)."""
    import jax
    import jax.numpy as jnp

    from agentrl_jax.models import layers

    b, t, heads, d = q.shape
    kv_heads = k.shape[2]
    q = (q * (1.0 / math.sqrt(d))).reshape(b, t, kv_heads, heads // kv_heads, d)
    q = q.transpose(0, 2, 3, 1, 4)
    k, v = k.transpose(0, 2, 1, 3), v.transpose(0, 2, 1, 3)
    outs = []
    for (lo, hi), mask in zip(layers.query_blocks(t, masks[0].shape[1]), masks, strict=True):
        scores = jnp.einsum("bkgtd,bksd->bkgts", q[:, :, :, lo:hi], k[:, :, :hi],
                            preferred_element_type=jnp.float32)
        scores = jnp.where(mask[:, None, None], scores, layers._MASKED)
        probs = jax.nn.softmax(scores, axis=-1)
        probs = jnp.where(jnp.any(mask, axis=-1)[:, None, None, :, None], probs, 0.0)
        outs.append(jnp.einsum("bkgts,bksd->bkgtd", probs.astype(v.dtype), v[:, :, :hi]))
    out = jnp.concatenate(outs, axis=3) if len(outs) > 1 else outs[0]
    return out.transpose(0, 3, 1, 2, 4).reshape(b, t, heads, d)


def run_variant(variant: str, cfg, tokens: int, length: int, steps: int) -> dict:
    """Times `steps` + 1 train steps of one variant in this process."""
    import jax
    from flax import nnx

    from agentrl_jax import hostmem

    hostmem.keep_freed_memory()  # as the warm start: buffers stay mapped between steps
    from agentrl_jax.models import layers as model_layers
    from agentrl_jax.models.decoder import Decoder
    from agentrl_jax.parallel.mesh import single_device_mesh
    from agentrl_jax.rl import train_step
    from agentrl_jax.rl.batch import Trajectory, pack

    if variant == "autodiff":  # the decoder looks the function up when it is traced
        model_layers.block_causal_attention = autodiff_block_attention
    c = train_step.default_config()
    c.update(seq_buckets=(length,), tokens_per_micro=tokens)
    c.optimizer.learning_rate = 1e-5
    trainer = train_step.Trainer(Decoder(cfg, rngs=nnx.Rngs(0)), c, single_device_mesh())
    state = trainer.init_state()
    rng = np.random.default_rng(0)
    rows = [Trajectory(tokens=rng.integers(0, cfg.vocab_size, length).astype(np.int32),
                       loss_mask=np.ones(length, np.float32),
                       behaviour_logprobs=np.full(length, -math.log(cfg.vocab_size), np.float32),
                       advantage=float(rng.standard_normal()))
            for _ in range(tokens // length)]
    micro, num_tokens = pack(rows, (length,), tokens)
    times, losses = [], []
    for _ in range(steps + 1):
        start = time.perf_counter()
        state, metrics = trainer.step(state, micro, num_tokens)
        jax.block_until_ready(state.params)
        times.append(time.perf_counter() - start)
        losses.append(float(metrics["loss"]))
    return {"first_step_s": times[0], "step_s": statistics.median(times[1:]),
            "peak_rss_gb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20,
            "losses": losses}


def measure(shape: str, layers: int, tokens: int, lengths: list[int], steps: int) -> dict:
    figures: dict = {"shape": shape, "layers": model_config(shape, layers).num_layers,
                     "tokens": tokens, "steps": steps}
    for length in lengths:
        per_variant = {}
        for variant in VARIANTS:
            done = subprocess.run(
                [sys.executable, "-m", "benchmarks.probes.attention_grad", "--variant", variant,
                 "--shape", shape, "--layers", str(layers), "--tokens", str(tokens),
                 "--lengths", str(length), "--steps", str(steps)],
                capture_output=True, text=True, check=False)
            if done.returncode != 0:
                raise RuntimeError(f"{variant} at {length} failed:\n{done.stderr[-3000:]}")
            result = json.loads(done.stdout.strip().splitlines()[-1])
            per_variant[variant] = result
            for key in ("first_step_s", "step_s", "peak_rss_gb"):
                figures[f"{variant}_{length}_{key}"] = result[key]
            print(f"{variant:>8} rows of {length:5d}: {result['step_s']:6.1f} s/step "
                  f"({tokens / result['step_s']:4.0f} tok/s), first "
                  f"{result['first_step_s']:5.1f} s, peak RSS {result['peak_rss_gb']:4.1f} GB",
                  flush=True)
        a, f = per_variant["autodiff"], per_variant["flash"]
        figures[f"step_speedup_{length}"] = a["step_s"] / f["step_s"]
        # Same weights, same batch: the steps' losses agree to float error.
        figures[f"loss_max_abs_diff_{length}"] = max(
            abs(x - y) for x, y in zip(a["losses"], f["losses"], strict=True))
        print(f"rows of {length}: FlashAttention's backward "
              f"{figures[f'step_speedup_{length}']:.2f}x the autodiff step; losses differ by "
              f"at most {figures[f'loss_max_abs_diff_{length}']:.1e}", flush=True)
    return figures


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--variant", choices=VARIANTS, help="run one variant (internal)")
    parser.add_argument("--shape", choices=("smollm2", "scratch"), default="smollm2")
    parser.add_argument("--layers", type=int, default=8, help="SmolLM2's (scratch: its own 4)")
    parser.add_argument("--tokens", type=int, default=4096)
    parser.add_argument("--lengths", default="2048,4096")
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--name", default="attention_grad", help="results/NAME.json")
    args = parser.parse_args()
    lengths = [int(x) for x in args.lengths.split(",")]
    if args.variant:
        print(json.dumps(run_variant(args.variant, model_config(args.shape, args.layers),
                                     args.tokens, lengths[0], args.steps)))
        return
    from benchmarks.machine_info import write_result

    path = write_result(args.name, measure(args.shape, args.layers, args.tokens, lengths,
                                           args.steps))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
