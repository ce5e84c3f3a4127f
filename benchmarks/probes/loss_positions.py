"""The warm-start step with the vocabulary projected at the loss's positions only (issue #29).

`rl.trainer.logprob_min_positions` > 0 has the trainer project onto the vocabulary only the
positions the loss reads (`rl.batch.loss_positions`), not every position of a row.
Measured on one full-depth SmolLM2-135M warm-start step over its whole 49,152-entry vocabulary:
one 1,536-token demonstration whose loss mask covers 13% of it in assistant turns (the mean
share in the cached SmolLM2 demonstrations), with every position projected
(`demo_all_positions`) and with the loss's only (`demo_loss_positions`, at least 128 a row).
The two variants of `benchmarks/warm_start_step.py`, each in its own process, in one run; the
figure is `loss_positions_vs_all_step`, the step's time with the selection over without.

    python -m benchmarks.probes.loss_positions [--steps 3]
"""

from __future__ import annotations

import argparse

from benchmarks.warm_start_step import measure

VARIANTS = ["demo_all_positions", "demo_loss_positions"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=3, help="timed steps after the first")
    args = parser.parse_args()

    from benchmarks.machine_info import write_result

    # vocab: the pruned size, which neither variant uses (both keep the whole vocabulary)
    figures = {"steps": args.steps, **measure(VARIANTS, vocab=0, steps=args.steps)}
    write_result("loss_positions", figures)


if __name__ == "__main__":
    main()
