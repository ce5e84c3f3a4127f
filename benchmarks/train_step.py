"""Train-step throughput and model FLOP utilisation, against HF PyTorch and the matmul peak.

One full policy-gradient step (forward, backward, AdamW) on random weights, fp32, batch 4 × 512,
for the SmolLM2-135M architecture and a tiny config. The same forward + backward + AdamW step of
transformers' LlamaForCausalLM (same config, random init, cross-entropy loss) runs in the same
process as the reference; the machine's dense fp32 matmul peak (jnp, 2048² @ 2048²) is
measured in the same run too. Ours and PyTorch are timed interleaved, so load from other
processes hits both alike.

Model FLOPs per step = 6 · N · tokens + 12 · L · H · D · T · tokens (PaLM's count: N parameters
including the (tied) output projection, attention over the full T × T square).

    python -m benchmarks.train_step [--batch 4] [--length 512] [--repeats 5]
"""

from __future__ import annotations

import argparse
import statistics
import time

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from agentrl_jax import hostmem
from agentrl_jax.models import logprobs
from agentrl_jax.models.config import ModelConfig
from agentrl_jax.models.decoder import Decoder
from agentrl_jax.parallel.mesh import make_mesh
from agentrl_jax.rl import train_step as ts
from agentrl_jax.rl.batch import TrainBatch
from benchmarks.machine_info import write_result
from benchmarks.model_shapes import SMOLLM2_135M

TINY = ModelConfig.tiny(vocab_size=512, hidden_size=128, intermediate_size=384, num_layers=4,
                        num_heads=4, num_kv_heads=2, head_dim=32)


def model_flops(cfg: ModelConfig, batch: int, length: int) -> float:
    tokens = batch * length
    attention = 12 * cfg.num_layers * cfg.num_heads * cfg.head_dim * length * tokens
    return 6.0 * cfg.num_params() * tokens + attention


def matmul_peak(n: int = 2048, repeats: int = 10) -> dict[str, float]:
    """Best-of FLOP/s of an n×n fp32 matmul in JAX (the reference peak), numpy and torch."""
    import torch  # the baselines' library: imported where used, so the rest runs without it

    flops = 2.0 * n**3
    a = np.random.default_rng(0).standard_normal((n, n), dtype=np.float32)
    ja = jnp.asarray(a)
    mm = jax.jit(lambda x: x @ x)
    ta = torch.from_numpy(a)
    out = {}
    for name, fn in (
        ("jax", lambda: mm(ja).block_until_ready()),
        ("numpy", lambda: a @ a),
        ("torch", lambda: ta @ ta),
    ):
        fn()
        best = min(_seconds(fn) for _ in range(repeats))
        out[name] = flops / best
    return out


def _seconds(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def ours(cfg: ModelConfig, batch: int, length: int, args):
    """A jitted step closure (returns after the update has landed) for our trainer."""
    trainer, state, mb = make_trainer(cfg, batch, length, args)
    box = {"state": state}

    def step():
        box["state"], metrics = trainer.step(box["state"], [mb], float(batch * length))
        return metrics  # floats: the step has finished

    return step


def components(cfg: ModelConfig, batch: int, length: int, args, repeats: int = 3) -> dict:
    """Best-of seconds of the step's parts: forward (log-probs), forward + backward (gradients),
    the optimizer update, and the LM head + log-probs alone (forward + backward)."""
    trainer, state, mb = make_trainer(cfg, batch, length, args)
    grads, _ = trainer.gradients(state.params, [mb], float(batch * length))
    box = {"state": state}

    def apply():
        box["state"], m = trainer._apply(box["state"], grads)
        jax.block_until_ready(m)

    rng = np.random.default_rng(1)
    hidden = jnp.asarray(rng.standard_normal((batch, length, cfg.hidden_size), np.float32))
    targets = jnp.asarray(mb.targets)
    tied = cfg.tie_word_embeddings
    head = jax.jit(jax.grad(
        lambda h, w: logprobs.chunked_logprobs(
            h, w, targets, chunk_size=args.chunk, vocab_major=tied, entropy_grad=False
        )[0].sum(), (0, 1),
    ))
    parts = {
        "forward": lambda: jax.block_until_ready(trainer.logprobs(box["state"].params, mb)),
        "forward_backward": lambda: jax.block_until_ready(
            trainer.gradients(box["state"].params, [mb], float(batch * length))
        ),
        "optimizer": apply,
        "lm_head_forward_backward": lambda: jax.block_until_ready(head(
            hidden, box["state"].params["embed" if tied else "lm_head"]
        )),
    }
    out = {}
    for name, fn in parts.items():
        fn()
        out[f"{name}_s"] = min(_seconds(fn) for _ in range(repeats))
    return out


def make_trainer(cfg: ModelConfig, batch: int, length: int, args):
    """Our trainer, its initial state and one random micro-batch of batch × length tokens.

    `args` carries remat, chunk (the log-prob chunk) and compute_dtype (None: the model's).
    """
    c = ts.default_config()
    c.remat = args.remat
    c.logprob_chunk = args.chunk
    c.compute_dtype = args.compute_dtype
    c.optimizer.learning_rate = 1e-5
    c.seq_buckets = (length,)
    c.tokens_per_micro = batch * length
    trainer = ts.Trainer(Decoder(cfg, rngs=nnx.Rngs(0)), c, make_mesh(devices=jax.devices()[:1]))
    state = trainer.init_state()
    rng = np.random.default_rng(0)
    shape = (batch, length)
    tokens = rng.integers(0, cfg.vocab_size, shape).astype(np.int32)
    mb = TrainBatch(
        tokens=tokens,
        positions=np.broadcast_to(np.arange(length, dtype=np.int32), shape).copy(),
        segment_ids=np.ones(shape, np.int32),
        targets=np.roll(tokens, -1, axis=1),
        loss_mask=np.ones(shape, np.float32),
        advantages=rng.standard_normal(shape).astype(np.float32),
        behaviour_logprobs=np.full(shape, -np.log(cfg.vocab_size), np.float32),
    )
    return trainer, state, mb


def hf_torch(cfg: ModelConfig, batch: int, length: int):
    """The same forward + backward + AdamW in transformers' LlamaForCausalLM."""
    import torch
    import transformers

    torch.manual_seed(0)
    hf_cfg = transformers.LlamaConfig(**{**cfg.to_hf(), "torch_dtype": None})
    model = transformers.LlamaForCausalLM(hf_cfg).train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-5, weight_decay=0.0)
    ids = torch.randint(0, cfg.vocab_size, (batch, length))

    def step():
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return float(loss.detach())

    return step


def measure(cfg: ModelConfig, batch: int, length: int, args) -> dict[str, float]:
    fns = {"ours": ours(cfg, batch, length, args), "torch": hf_torch(cfg, batch, length)}
    for fn in fns.values():  # compile / warm up
        fn()
        fn()
    times = {k: [] for k in fns}
    adjacent_peak = []  # the matmul peak measured right before each repeat
    for _ in range(args.repeats):
        adjacent_peak.append(matmul_peak(repeats=3)["jax"])
        for k, fn in fns.items():
            times[k].append(_seconds(fn))
    tokens = batch * length
    flops = model_flops(cfg, batch, length)
    med = {k: statistics.median(v) for k, v in times.items()}
    # Load from other processes slows the matmul probe and the step alike; this ratio is
    # the utilisation with that load divided out (a cross-check on the headline figure).
    adjacent = statistics.median(
        flops / t / p for t, p in zip(times["ours"], adjacent_peak, strict=True)
    )
    return {
        "mfu_vs_adjacent_matmul": adjacent,
        "adjacent_matmul_flops_per_s": adjacent_peak,
        "params": cfg.num_params(),
        "model_flops_per_step": flops,
        "ours_step_s": med["ours"],
        "torch_step_s": med["torch"],
        "ours_tokens_per_s": tokens / med["ours"],
        "torch_tokens_per_s": tokens / med["torch"],
        "ours_model_flops_per_s": flops / med["ours"],
        "torch_model_flops_per_s": flops / med["torch"],
        "train_step_vs_hf_torch": med["torch"] / med["ours"],
        "ours_step_s_all": times["ours"],
        "torch_step_s_all": times["torch"],
    }


def main() -> None:
    hostmem.keep_freed_memory()  # before the first array: see agentrl_jax/hostmem.py
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--length", type=int, default=512)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--chunk", type=int, default=256, help="log-prob sequence chunk")
    parser.add_argument("--remat", action="store_true")
    parser.add_argument("--compute_dtype", default=None, help='e.g. "bfloat16" (default: fp32)')
    parser.add_argument("--skip_tiny", action="store_true")
    parser.add_argument("--components", action="store_true",
                        help="also time forward, backward, optimizer and LM head separately")
    args = parser.parse_args()

    peak_before = matmul_peak()
    smol = measure(SMOLLM2_135M, args.batch, args.length, args)
    if args.components:
        smol["components"] = components(SMOLLM2_135M, args.batch, args.length, args)
    tiny = None if args.skip_tiny else measure(TINY, args.batch, args.length, args)
    peak_after = matmul_peak()
    # The peak is the best the machine showed during the run (before or after the models).
    peak = max(peak_before["jax"], peak_after["jax"])

    figures = {
        "batch": args.batch,
        "length": args.length,
        "dtype": args.compute_dtype or "float32",
        "train_step_vs_hf_torch": smol["train_step_vs_hf_torch"],
        "mfu_vs_matmul_peak": smol["ours_model_flops_per_s"] / peak,
        "torch_mfu_vs_matmul_peak": smol["torch_model_flops_per_s"] / peak,
        "matmul_peak_flops_per_s": peak,
        "matmul_2048_flops_per_s": {"before": peak_before, "after": peak_after},
        "smollm2_135m": smol,
        "options": {"remat": args.remat, "logprob_chunk": args.chunk},
    }
    if tiny is not None:
        figures["tiny"] = tiny
        figures["tiny_train_step_vs_hf_torch"] = tiny["train_step_vs_hf_torch"]
        figures["tiny_mfu_vs_matmul_peak"] = tiny["ours_model_flops_per_s"] / peak
    g = 1e9
    print(f"fp32 matmul peak (jax 2048²): {peak / g:.1f} GFLOP/s")
    for name, r in (("SmolLM2-135M", smol), ("tiny", tiny)):
        if r is None:
            continue
        print(f"{name}: ours {r['ours_tokens_per_s']:.0f} tok/s "
              f"({r['ours_model_flops_per_s'] / g:.1f} GFLOP/s, "
              f"{r['ours_model_flops_per_s'] / peak:.0%} of peak), "
              f"torch {r['torch_tokens_per_s']:.0f} tok/s "
              f"({r['torch_model_flops_per_s'] / g:.1f} GFLOP/s), "
              f"ratio {r['train_step_vs_hf_torch']:.2f}x")
    print(f"wrote {write_result('train_step', figures)}")


if __name__ == "__main__":
    main()
