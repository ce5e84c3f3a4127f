"""Full fine-tuning against LoRA (rank 16, all projections) on SmolLM2-135M-Instruct.

Same batch, same run; each part in its own subprocess, so each peak RSS is its own:
  * steps and profile (`profile_part`), all timed interleaved in one process, so that load
    which drifts between them hits each alike (`--rounds`, medians): one policy-gradient
    train step (forward, backward, AdamW), fp32, batch × length tokens, full parameters vs
    adapters over a frozen base (`lora_vs_full_step`, and what each step spends beyond its
    gradient program, `*_step_beyond_grad_s`); and four programs of one loss: its forward,
    its gradient in every weight, in the layers' norm scales only (the frozen base's floor:
    activations' gradients, no weight gradients) and in the adapters:
    `frozen_base_floor_vs_full_grad` is the best any adapter method can do on this base,
    `lora_grad_vs_full_grad` what LoRA does. This process keeps freed memory mapped
    (`agentrl_jax.hostmem`), as the warm start does: otherwise every execution page-faults its
    buffers anew, which cost the LoRA gradient up to 2 s of its 7;
  * memory: `full_peak_rss_mb`, `lora_peak_rss_mb` of a process that takes two steps;
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

    python -m benchmarks.lora [--batch 4] [--length 256] [--rounds 5] [--decode_batch 8]
"""

from __future__ import annotations

import argparse
import asyncio
import functools
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

from agentrl_jax import hostmem
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


def memory_part(mode: str, batch: int, length: int) -> dict:
    """Peak RSS of a process that takes two train steps, and the bytes one weight sync carries."""
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
    for _ in range(2):
        state, _ = trainer.step(state, [mb], float(batch * length))
    sync_bytes = weight_sync.WeightUpdate.of(1, weight_sync.snapshot(trainer, state)).nbytes
    return {"peak_rss_mb": _peak_rss_mb(), "sync_bytes": sync_bytes}


def _interleaved_times(programs: dict, rounds: int) -> dict[str, list[float]]:
    """Wall times of each thunk (blocked on its result) after one call that compiles, timed in
    rounds that run every program once, so load that drifts hits all of them alike."""
    for fn in programs.values():
        jax.block_until_ready(fn())
    times: dict[str, list[float]] = {name: [] for name in programs}
    for _ in range(rounds):
        for name, fn in programs.items():
            start = time.perf_counter()
            jax.block_until_ready(fn())
            times[name].append(time.perf_counter() - start)
    return times


def profile_part(batch: int, length: int, rounds: int) -> dict:
    """Where the LoRA step's time goes: the two train steps and four programs of one loss
    (−Σ log π(targets)), all timed interleaved in one process:

      forward: the log-probs alone;
      full_grad: ∂/∂ every weight;
      base_backward: ∂/∂ the layers' input-norm scales only, which needs the activations'
        gradient through every layer but none of the weight-gradient matmuls: the floor under
        any adapter method on this frozen base;
      lora_grad: ∂/∂ the adapters (rank 16, every projection);
      full_step, lora_step: `Trainer.step` (policy-gradient loss, gradient, AdamW);
      full_pg_grad, lora_pg_grad: `Trainer.gradients`, the step's gradient of its own loss
        (the policy-gradient objective, its entropy and metrics) without the update;
      full_update, lora_update: the step's AdamW update alone, on gradients computed before.

    So full_grad − base_backward is what freezing the base can save at most, and
    lora_grad − base_backward is what the adapters cost on top of that floor; a step's time
    beyond its plain gradient splits into its loss (pg_grad − grad), its update, and the rest
    (step − pg_grad − update: dispatch, metrics to the host). The weights are the programs'
    arguments, as in a train step (closed over, they would be constants).
    """
    import jax.numpy as jnp
    import optax

    from agentrl_jax.parallel.mesh import make_mesh
    from agentrl_jax.rl import train_step as ts

    mesh = make_mesh(devices=jax.devices()[:1])
    tokens = float(batch * length)

    def trainer(lora: bool):
        c = ts.default_config()
        c.optimizer.learning_rate = 1e-5
        c.seq_buckets, c.tokens_per_micro = (length,), batch * length
        if lora:
            _lora_config(c)
        t = ts.Trainer(_base(), c, mesh)
        return t, _batch(batch, length, t.model_view().cfg.vocab_size)

    def loss(t, p, mb, base=None):
        return -t.logprobs(p, mb, base)[0].sum()

    def stepper(t, mb):
        state = [t.init_state()]   # a step donates its state: each call takes the last one's

        def step():
            state[0], _ = t.step(state[0], [mb], tokens)  # floats: the step has finished
            return state[0].params
        return step, state

    full, mb = trainer(lora=False)
    full_step, full_state = stepper(full, mb)
    params = jax.tree.map(lambda x: x.copy(), full_state[0].params)

    def norms_loss(norms, params):
        return loss(full, {**params, "layers": {**params["layers"], "input_norm": norms}}, mb)

    full_grad = jax.jit(jax.grad(lambda p: loss(full, p, mb)))
    base_backward = jax.jit(jax.grad(norms_loss))
    lora, lora_mb = trainer(lora=True)
    lora_step, lora_state = stepper(lora, lora_mb)
    adapters = jax.tree.map(lambda x: x.copy(), lora_state[0].params)
    base = lora.frozen_params
    lora_grad = jax.jit(jax.grad(lambda p, base: loss(lora, p, lora_mb, base)))

    def updater(t, state):
        """The step's optimizer update alone, on the gradient of the state's own params."""
        grads = jax.tree.map(jnp.ones_like, state.params)
        update = jax.jit(lambda params, opt, grads: optax.apply_updates(
            params, t.tx.update(grads, opt, params)[0]))
        return lambda: update(state.params, state.opt_state, grads)

    full_update = updater(full, full.init_state())
    lora_update = updater(lora, lora.init_state())
    times = _interleaved_times({
        "forward_s": lambda: full.logprobs(params, mb)[0],
        "full_grad_s": lambda: full_grad(params),
        "base_backward_s": lambda: base_backward(params["layers"]["input_norm"], params),
        "full_step_s": full_step,
        "lora_forward_s": lambda: lora.logprobs(adapters, lora_mb)[0],
        "lora_grad_s": lambda: lora_grad(adapters, base),
        "lora_step_s": lora_step,
        "full_pg_grad_s": lambda: full.gradients(params, [mb], tokens)[0],
        "lora_pg_grad_s": lambda: lora.gradients(adapters, [lora_mb], tokens)[0],
        "full_update_s": full_update,
        "lora_update_s": lora_update,
    }, rounds)
    return {f"profile_{k}": statistics.median(t) for k, t in times.items()}


def _gflop(compiled) -> float:
    cost = compiled.cost_analysis()
    cost = cost[0] if isinstance(cost, list) else cost
    return cost["flops"] / 1e9


def flops_part(batch: int, length: int) -> dict:
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
    times = _interleaved_times({name: functools.partial(engine.generate, requests)
                                for name, engine in engines.items()}, rounds)
    tok_s = {name: batch * new / min(t) for name, t in times.items()}
    return {f"{name}_decode_tok_s": v for name, v in tok_s.items()}


def _beyond_grad(profile: dict, mode: str) -> dict[str, float]:
    """A step's time beyond its plain gradient, split: its loss's extra cost over −Σ log π
    (`pg_loss`), its optimizer update (`update`), and the rest (`other`)."""
    get = lambda name: profile[f"profile_{mode}_{name}_s"]  # noqa: E731
    return {"pg_loss": get("pg_grad") - get("grad"), "update": get("update"),
            "other": get("step") - get("pg_grad") - get("update")}


def _subprocess(*args: str) -> dict:
    out = subprocess.run([sys.executable, "-m", "benchmarks.lora", *args], check=True,
                         capture_output=True, text=True, env=os.environ.copy())
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--part", choices=["memory", "flops", "decode", "profile"])
    parser.add_argument("--mode", choices=["full", "lora"], default="full")
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--length", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--decode_batch", type=int, default=8)
    parser.add_argument("--prompt", type=int, default=64)
    parser.add_argument("--new", type=int, default=64)
    args = parser.parse_args()
    shape = ("--batch", str(args.batch), "--length", str(args.length))
    if args.part == "memory":
        print(json.dumps(memory_part(args.mode, args.batch, args.length)))
        return
    if args.part == "flops":
        print(json.dumps(flops_part(args.batch, args.length)))
        return
    if args.part == "decode":
        print(json.dumps(decode_part(args.decode_batch, args.prompt, args.new, args.rounds)))
        return
    if args.part == "profile":
        # Freed buffers stay mapped, as in the warm start and `benchmarks/train_step.py`:
        # with malloc's defaults each execution page-faults its temporaries anew, and how many
        # of a program's buffers that hits (the LoRA gradient's 200 MB logits among them) is
        # luck of the allocator, not a property of the method. Before the first array.
        hostmem.keep_freed_memory()
        print(json.dumps(profile_part(args.batch, args.length, args.rounds)))
        return
    full = _subprocess("--part", "memory", *shape, "--mode", "full")
    lora = _subprocess("--part", "memory", *shape, "--mode", "lora")
    flops = _subprocess("--part", "flops", *shape)
    profile = _subprocess("--part", "profile", *shape, "--rounds", str(args.rounds))
    decode = _subprocess("--part", "decode", "--decode_batch", str(args.decode_batch),
                         "--prompt", str(args.prompt), "--new", str(args.new),
                         "--rounds", str(args.rounds))
    figures = {
        "lora_vs_full_step": profile["profile_lora_step_s"] / profile["profile_full_step_s"],
        "lora_vs_full_flops": flops["lora_step_gflop"] / flops["full_step_gflop"], **flops,
        "full_peak_rss_mb": full["peak_rss_mb"], "lora_peak_rss_mb": lora["peak_rss_mb"],
        **profile,
        "lora_grad_vs_full_grad": profile["profile_lora_grad_s"] / profile["profile_full_grad_s"],
        "frozen_base_floor_vs_full_grad":
            profile["profile_base_backward_s"] / profile["profile_full_grad_s"],
        "lora_step_beyond_grad_s":
            profile["profile_lora_step_s"] - profile["profile_lora_grad_s"],
        "full_step_beyond_grad_s":
            profile["profile_full_step_s"] - profile["profile_full_grad_s"],
        **{f"{mode}_step_{part}_s": seconds for mode in ("full", "lora")
           for part, seconds in _beyond_grad(profile, mode).items()},
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
