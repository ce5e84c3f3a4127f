"""Full fine-tuning against LoRA (rank 16, all projections) on SmolLM2-135M-Instruct.

Same batch, same run (each part in its own subprocess, so each peak RSS is its own):
  * train step: one policy-gradient step (forward, backward, AdamW), fp32, batch × length
    tokens, full parameters vs adapters over a frozen base: `lora_vs_full_step` (seconds ratio,
    median of `--steps` after a warm-up step), `full_peak_rss_mb`, `lora_peak_rss_mb`;
  * profile (`profile_part`): the loss's forward, its gradient in every weight, in the
    layers' norm scales only (the frozen base's floor: activations' gradients, no weight
    gradients) and in the adapters, each timed alone: `frozen_base_floor_vs_full_grad` is the
    best any adapter method can do on this base, `lora_grad_vs_full_grad` what LoRA does;
  * weight update: bytes one sync carries, `full_sync_bytes` (the sampler-layout weights) vs
    `lora_sync_bytes` (the adapter tree);
  * FLOPs of one step (XLA's cost analysis of the compiled gradient and optimizer update):
    `full_step_gflop`, `lora_step_gflop`, `lora_vs_full_flops`, and the LoRA step's forward
    (`lora_forward_gflop`). XLA counts a while loop's body once, so these are compiled with
    every `lax.scan` unrolled (the layer stack, the logits chunks), in their own subprocess;
    unlike the times, they do not depend on the machine's load;
  * decode: greedy tokens/s of the sampling engine at batch `--decode_batch`, the base model vs
    the same base with the adapter applied unmerged (`AdapterSamplingEngine`, the serving path)
    vs merged into a copy of the weights: `lora_decode_vs_base` (unmerged / base) and
    `merged_decode_vs_base`. The three engines are timed interleaved.

    python -m benchmarks.lora [--batch 4] [--length 256] [--steps 3] [--decode_batch 8]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import statistics
import subprocess
import sys
import time

import jax
import numpy as np
from flax import nnx

from benchmarks.machine_info import write_result

MODEL = "smollm2-135m-instruct"


def _base():
    from agentrl_jax.models.hf_io import load_hf
    from agentrl_jax.models.zoo import resolve_model_dir

    return load_hf(resolve_model_dir(MODEL))


def _peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def _lora_config(c) -> None:
    c.lora.update(enabled=True, rank=16, alpha=32.0)


def train_part(mode: str, batch: int, length: int, steps: int) -> dict:
    from agentrl_jax.parallel.mesh import make_mesh
    from agentrl_jax.pipeline import weight_sync
    from agentrl_jax.rl import train_step as ts

    c = ts.default_config()
    c.optimizer.learning_rate = 1e-5
    c.seq_buckets, c.tokens_per_micro = (length,), batch * length
    if mode == "lora":
        _lora_config(c)
    model = _base()
    trainer = ts.Trainer(model, c, make_mesh(devices=jax.devices()[:1]))
    del model
    state = trainer.init_state()
    mb = _batch(batch, length, trainer.model_view().cfg.vocab_size)
    times = []
    for _ in range(steps + 1):
        start = time.perf_counter()
        state, _ = trainer.step(state, [mb], float(batch * length))  # floats: step finished
        times.append(time.perf_counter() - start)
    sync_bytes = weight_sync.WeightUpdate.of(1, weight_sync.snapshot(trainer, state)).nbytes
    return {"step_s": statistics.median(times[1:]), "peak_rss_mb": _peak_rss_mb(),
            "sync_bytes": sync_bytes}


def _median_seconds(fn, repeats: int) -> float:
    """Median wall time of `fn()` (blocked on its result) after one call that compiles."""
    jax.block_until_ready(fn())
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        jax.block_until_ready(fn())
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def profile_part(batch: int, length: int, repeats: int) -> dict:
    """Where the LoRA step's time goes, as differences of four programs on one loss
    (−Σ log π(targets)), timed in one process:

      forward: the log-probs alone;
      full_grad: ∂/∂ every weight;
      base_backward: ∂/∂ the layers' input-norm scales only, which needs the activations'
        gradient through every layer but none of the weight-gradient matmuls: the floor under
        any adapter method on this frozen base;
      lora_grad: ∂/∂ the adapters (rank 16, every projection).

    So full_grad − base_backward is what freezing the base can save at most, and
    lora_grad − base_backward is what the adapters cost on top of that floor.
    """
    from agentrl_jax.parallel.mesh import make_mesh
    from agentrl_jax.rl import train_step as ts

    mesh = make_mesh(devices=jax.devices()[:1])

    def trainer(lora: bool):
        c = ts.default_config()
        c.seq_buckets, c.tokens_per_micro = (length,), batch * length
        if lora:
            _lora_config(c)
        t = ts.Trainer(_base(), c, mesh)
        return t, t.init_state().params, _batch(batch, length, t.model_view().cfg.vocab_size)

    def loss(t, p, mb):
        return -t.logprobs(p, mb)[0].sum()

    def full_programs() -> dict:
        t, params, mb = trainer(lora=False)

        def norms_loss(norms):
            return loss(t, {**params, "layers": {**params["layers"], "input_norm": norms}}, mb)

        full_grad = jax.jit(jax.grad(lambda p: loss(t, p, mb)))
        base_backward = jax.jit(jax.grad(norms_loss))
        return {
            "forward_s": _median_seconds(lambda: t.logprobs(params, mb)[0], repeats),
            "full_grad_s": _median_seconds(lambda: full_grad(params), repeats),
            "base_backward_s": _median_seconds(
                lambda: base_backward(params["layers"]["input_norm"]), repeats),
        }

    def lora_programs() -> dict:
        t, adapters, mb = trainer(lora=True)
        lora_grad = jax.jit(jax.grad(lambda p: loss(t, p, mb)))
        return {"lora_forward_s": _median_seconds(lambda: t.logprobs(adapters, mb)[0], repeats),
                "lora_grad_s": _median_seconds(lambda: lora_grad(adapters), repeats)}

    out = {**full_programs(), **lora_programs()}
    return {f"profile_{k}": v for k, v in out.items()}


def _gflop(compiled) -> float:
    cost = compiled.cost_analysis()
    cost = cost[0] if isinstance(cost, list) else cost
    return cost["flops"] / 1e9


def flops_part(batch: int, length: int) -> dict:
    import functools

    import optax

    scan = jax.lax.scan
    jax.lax.scan = functools.partial(scan, unroll=True)  # see the module docstring
    from agentrl_jax.parallel.mesh import make_mesh
    from agentrl_jax.rl import train_step as ts

    out = {}
    for mode in ("full", "lora"):
        c = ts.default_config()
        c.seq_buckets, c.tokens_per_micro = (length,), batch * length
        if mode == "lora":
            _lora_config(c)
        trainer = ts.Trainer(_base(), c, make_mesh(devices=jax.devices()[:1]))
        state = trainer.init_state()
        mb = _batch(batch, length, trainer.model_view().cfg.vocab_size)
        grads = jax.jit(lambda p, mb, t=trainer: t.gradients(p, [mb], float(batch * length))
                        ).lower(state.params, mb)
        update = jax.jit(lambda s, g, t=trainer: optax.apply_updates(
            s.params, t.tx.update(g, s.opt_state, s.params)[0])).lower(state, state.params)
        out[f"{mode}_step_gflop"] = _gflop(grads.compile()) + _gflop(update.compile())
        if mode == "lora":
            forward = jax.jit(trainer.logprobs).lower(state.params, mb)
            out["lora_forward_gflop"] = _gflop(forward.compile())
        del trainer, state
    return out


def _batch(batch: int, length: int, vocab: int):
    """One packed micro-batch of random tokens, every position trained."""
    from agentrl_jax.rl.batch import TrainBatch

    rng = np.random.default_rng(0)
    shape = (batch, length)
    tokens = rng.integers(0, vocab, shape).astype(np.int32)
    return TrainBatch(
        tokens=tokens, positions=np.broadcast_to(np.arange(length, dtype=np.int32), shape).copy(),
        segment_ids=np.ones(shape, np.int32), targets=np.roll(tokens, -1, axis=1),
        loss_mask=np.ones(shape, np.float32),
        advantages=rng.standard_normal(shape).astype(np.float32),
        behaviour_logprobs=np.full(shape, -10.0, np.float32))


def decode_part(batch: int, prompt_len: int, new: int, rounds: int) -> dict:
    from agentrl_jax.models import lora
    from agentrl_jax.models.config import LoraConfig
    from agentrl_jax.sampling import EngineConfig, GenerateRequest, SamplingEngine, SamplingParams
    from agentrl_jax.sampling.adapter_engine import AdapterSamplingEngine, adapter_tree
    from agentrl_jax.tree_digest import tree_digest

    cfg = EngineConfig(
        max_batch=batch, page_size=16, num_pages=batch * (prompt_len + new) // 16 + 8,
        max_context=prompt_len + new, prefill_buckets=(prompt_len,),
        prefill_batch_buckets=(min(batch, 8),), context_buckets=(prompt_len + new,),
        batch_buckets=(batch,), steps_per_sync=16)
    base = _base()
    adapted = lora.with_adapters(base, LoraConfig(rank=16, alpha=32.0))
    rng = np.random.default_rng(0)
    trained = jax.tree.map(lambda x: (np.asarray(x) + 0.01 * rng.standard_normal(x.shape)
                                      ).astype(np.float32), jax.device_get(adapter_tree(adapted)))
    engines = {"base": SamplingEngine(base, cfg)}
    front = AdapterSamplingEngine(SamplingEngine(adapted, cfg), adapted)
    served = asyncio.run(front.receive("current", 1, trained, tree_digest(trained)))
    assert served == (1, tree_digest(trained)), served
    front.close()  # the loop thread stops; the engine itself is driven directly below
    engines["unmerged"] = front.engine
    graphdef, _, base_params = lora.split(adapted)
    merged = lora.merged(nnx.merge(graphdef, lora.combine(base_params, trained)))
    engines["merged"] = SamplingEngine(merged, cfg)
    del base, adapted, merged
    greedy = SamplingParams(temperature=0.0, max_new_tokens=new)
    requests = [GenerateRequest(list(rng.integers(0, 49152, prompt_len)), greedy)
                for _ in range(batch)]
    for engine in engines.values():
        engine.warmup()
        engine.generate(requests[:1])
    times = {name: [] for name in engines}
    for _ in range(rounds):  # interleaved, so load from other processes hits all alike
        for name, engine in engines.items():
            start = time.perf_counter()
            engine.generate(requests)
            times[name].append(time.perf_counter() - start)
    tok_s = {name: batch * new / min(t) for name, t in times.items()}
    return {f"{name}_decode_tok_s": v for name, v in tok_s.items()}


def _subprocess(*args: str) -> dict:
    out = subprocess.run([sys.executable, "-m", "benchmarks.lora", *args], check=True,
                         capture_output=True, text=True, env=os.environ.copy())
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--part", choices=["train", "flops", "decode", "profile"])
    parser.add_argument("--mode", choices=["full", "lora"], default="full")
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--length", type=int, default=256)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--decode_batch", type=int, default=8)
    parser.add_argument("--prompt", type=int, default=64)
    parser.add_argument("--new", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    if args.part == "train":
        print(json.dumps(train_part(args.mode, args.batch, args.length, args.steps)))
        return
    if args.part == "flops":
        print(json.dumps(flops_part(args.batch, args.length)))
        return
    if args.part == "decode":
        print(json.dumps(decode_part(args.decode_batch, args.prompt, args.new, args.rounds)))
        return
    if args.part == "profile":
        print(json.dumps(profile_part(args.batch, args.length, args.steps)))
        return
    train = ("--part", "train", "--batch", str(args.batch), "--length", str(args.length),
             "--steps", str(args.steps))
    full = _subprocess(*train, "--mode", "full")
    lora = _subprocess(*train, "--mode", "lora")
    flops = _subprocess("--part", "flops", "--batch", str(args.batch), "--length",
                        str(args.length))
    profile = _subprocess("--part", "profile", "--batch", str(args.batch), "--length",
                          str(args.length), "--steps", str(args.steps))
    decode = _subprocess("--part", "decode", "--decode_batch", str(args.decode_batch),
                         "--prompt", str(args.prompt), "--new", str(args.new),
                         "--rounds", str(args.rounds))
    figures = {
        "lora_vs_full_step": lora["step_s"] / full["step_s"],
        "full_step_s": full["step_s"], "lora_step_s": lora["step_s"],
        "lora_vs_full_flops": flops["lora_step_gflop"] / flops["full_step_gflop"], **flops,
        "full_peak_rss_mb": full["peak_rss_mb"], "lora_peak_rss_mb": lora["peak_rss_mb"],
        **profile,
        "lora_grad_vs_full_grad": profile["profile_lora_grad_s"] / profile["profile_full_grad_s"],
        "frozen_base_floor_vs_full_grad":
            profile["profile_base_backward_s"] / profile["profile_full_grad_s"],
        "full_sync_bytes": full["sync_bytes"], "lora_sync_bytes": lora["sync_bytes"],
        "lora_decode_vs_base": decode["unmerged_decode_tok_s"] / decode["base_decode_tok_s"],
        "merged_decode_vs_base": decode["merged_decode_tok_s"] / decode["base_decode_tok_s"],
        **decode,
        "train_tokens": args.batch * args.length, "decode_batch": args.decode_batch,
        "load_average_1m": os.getloadavg()[0],
    }
    for name, value in figures.items():
        print(f"{name}: {value:.4g}" if isinstance(value, float) else f"{name}: {value}")
    print(f"wrote {write_result('lora', figures)}")


if __name__ == "__main__":
    main()
