"""The train step's first micro-batch as the gradient accumulator, against a zero tree.

`rl.train_step.Trainer.gradients` once filled a zero tree of the parameters' shape and added
every micro-batch's gradient to it; now the first micro-batch's gradient is the accumulator.
This times, in one process and interleaved, one full step (gradient + AdamW) both ways on
SmolLM2-135M (fp32, every weight trained, batch 4 × 256, one micro-batch): the zero-tree path
is rebuilt here from the trainer's own accumulating program.

    python -m benchmarks.probes.first_gradient [--repeats 6]
"""

from __future__ import annotations

import argparse
import statistics
import time

import jax
import jax.numpy as jnp

from benchmarks import lora as lora_bench
from benchmarks.machine_info import write_result


def main() -> None:
    from agentrl_jax.parallel.mesh import make_mesh
    from agentrl_jax.rl import train_step as ts

    parser = argparse.ArgumentParser()
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--length", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=6)
    args = parser.parse_args()
    c = ts.default_config()
    c.optimizer.learning_rate = 1e-5
    c.seq_buckets, c.tokens_per_micro = (args.length,), args.batch * args.length
    trainer = ts.Trainer(lora_bench._base(), c, make_mesh(devices=jax.devices()[:1]))
    box = {"state": trainer.init_state()}
    mb = lora_bench._batch(args.batch, args.length, trainer.model_view().cfg.vocab_size)
    n = jnp.asarray(float(args.batch * args.length), jnp.float32)
    shapes = jax.eval_shape(lambda: box["state"].params)
    zeros = jax.jit(lambda: jax.tree.map(lambda a: jnp.zeros(a.shape, a.dtype), shapes))
    fixed = (n, trainer.ref_params, trainer.frozen_params)

    def from_zeros():
        grads, _ = trainer._accumulate(box["state"].params, zeros(), trainer.shard_batch(mb),
                                       *fixed)
        box["state"], _ = trainer._apply(box["state"], grads)

    def first_gradient():
        grads, _ = trainer._gradient(box["state"].params, trainer.shard_batch(mb), *fixed)
        box["state"], _ = trainer._apply(box["state"], grads)

    times: dict[str, list[float]] = {"from_zeros": [], "first_gradient": []}
    for fn in (from_zeros, first_gradient):  # compile both
        fn()
        jax.block_until_ready(box["state"].params)
    for _ in range(args.repeats):
        for name, fn in (("from_zeros", from_zeros), ("first_gradient", first_gradient)):
            start = time.perf_counter()
            fn()
            jax.block_until_ready(box["state"].params)
            times[name].append(time.perf_counter() - start)
    old, new = (statistics.median(times[k]) for k in ("from_zeros", "first_gradient"))
    print(f"full step, SmolLM2-135M fp32, {args.batch} x {args.length}: zero-tree accumulator "
          f"{old:.2f} s, first gradient as accumulator {new:.2f} s, ratio {new / old:.3f}")
    figures = {"batch": args.batch, "length": args.length, "repeats": args.repeats,
               "step_from_zeros_s": old, "step_first_gradient_s": new,
               "first_gradient_vs_zeros_step": new / old}
    print(f"wrote {write_result('first_gradient', figures)}")


if __name__ == "__main__":
    main()
