"""Where a full-depth SmolLM2 warm-start step spends its time and memory (issue #29).

One SFT step (`sft.trainer.SFTTrainer`: forward, backward, AdamW) of the SmolLM2-135M shape at
all 30 layers, on random weights and tokens, in several variants that each change one thing
against `pruned`:

    full_vocab   the model's own 49,152-entry vocabulary (`pruned` keeps `--vocab` entries, what
                 `models/shrink.py` leaves of it for the five tasks' demonstrations)
    remat        every block recomputed in the backward pass
    lora         rank-16 adapters on every projection over the frozen base
    one_row      the step's tokens as one 4,096-token row instead of four of 1,024 (attention
                 cost grows with the row length)
    one_demo     one 1,024-token row: what `configs/local_smollm2.py` trains per step (about
                 one demonstration, `sft.tokens_per_step` = 1,024)
    demo_padded  one 1,536-token demonstration over the whole vocabulary, as
                 `configs/local_smollm2.py` (`sft.tokens_per_micro` = 4,096) packed it before
                 `rl.batch.pack` cut the last micro-batch to the rows it needs: 2 rows, one empty
    demo_cut     the same demonstration as `pack` packs it now: 1 row
    demo_all_positions   the same demonstration with a demonstration's loss mask (13% of its
                 tokens, the assistant's, in turns of 40: the mean share in the 100 cached
                 SmolLM2 demonstrations), every position projected onto the vocabulary
                 (`rl.trainer.logprob_min_positions` = 0)
    demo_loss_positions  the same with only the loss's positions projected (at least 128)
    bf16         compute in bf16 (`compute_dtype`; fp32 master weights and Adam), the products
                 as `models/matmul.py` writes them
    full_vocab_bf16  the whole vocabulary in bf16: `configs/local_smollm2.py`'s warm start

Each variant runs in its own process, so its peak resident memory is its own. Reported per
variant: the first step's seconds (compilation included), the median of the next steps,
tokens per second, and the peak RSS. Same-run ratios against `pruned` say what each choice
costs. The default runs the four variants that decide the warm start's precision (about five
minutes on a 2-core CPU); `--only` names others, `--only all` runs every one (about 18).

    python -m benchmarks.warm_start_step [--only pruned bf16 ...|all] [--vocab 4308] [--steps 2]
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import time

import numpy as np

ROWS, LENGTH = 4, 1024
DEMO_LOSS_SHARE, DEMO_TURN = 0.13, 40  # the assistant's share of a demonstration, turn length
VARIANTS = {  # name: (full vocabulary, remat, LoRA, rows, length, empty rows, loss mask, dtype)
    "pruned": (False, False, False, ROWS, LENGTH, 0, "all", None),
    "full_vocab": (True, False, False, ROWS, LENGTH, 0, "all", None),
    "remat": (False, True, False, ROWS, LENGTH, 0, "all", None),
    "lora": (False, False, True, ROWS, LENGTH, 0, "all", None),
    "one_row": (False, False, False, 1, ROWS * LENGTH, 0, "all", None),
    "one_demo": (False, False, False, 1, LENGTH, 0, "all", None),
    "demo_padded": (True, False, False, 1, 1536, 1, "all", None),
    "demo_cut": (True, False, False, 1, 1536, 0, "all", None),
    "demo_all_positions": (True, False, False, 1, 1536, 0, "turns, every position", None),
    "demo_loss_positions": (True, False, False, 1, 1536, 0, "turns", None),
    "bf16": (False, False, False, ROWS, LENGTH, 0, "all", "bfloat16"),
    "full_vocab_bf16": (True, False, False, ROWS, LENGTH, 0, "all", "bfloat16"),
}
DEFAULT_VARIANTS = ("pruned", "bf16", "full_vocab", "full_vocab_bf16")


def demo_loss_mask(length: int) -> np.ndarray:
    """1 on assistant turns of DEMO_TURN tokens spread evenly, DEMO_LOSS_SHARE of `length`."""
    mask = np.zeros(length, np.float32)
    turns = round(length * DEMO_LOSS_SHARE / DEMO_TURN)
    for start in np.linspace(0, length - DEMO_TURN, turns + 1)[1:].astype(int):
        mask[start:start + DEMO_TURN] = 1.0
    return mask


def run_variant(name: str, vocab: int, steps: int) -> dict[str, float]:
    """Builds the variant's trainer and times `steps` + 1 steps (in this process)."""
    import jax
    from flax import nnx

    from agentrl_jax import hostmem
    from agentrl_jax.models.decoder import Decoder
    from agentrl_jax.parallel.mesh import single_device_mesh
    from agentrl_jax.rl import train_step
    from agentrl_jax.rl.batch import Trajectory, pack
    from agentrl_jax.sft.trainer import SFTTrainer
    from benchmarks.model_shapes import SMOLLM2_135M

    hostmem.keep_freed_memory()
    full_vocab, remat, lora, rows, length, empty, loss, dtype = VARIANTS[name]
    cfg = SMOLLM2_135M if full_vocab else SMOLLM2_135M.replace(vocab_size=vocab)
    c = train_step.default_config()
    c.update(remat=remat, seq_buckets=(length,), tokens_per_micro=rows * length,
             compute_dtype=dtype)
    if loss == "turns":
        c.logprob_min_positions = 128
    c.optimizer.learning_rate = 2e-5
    c.lora.enabled = lora
    trainer = SFTTrainer(Decoder(cfg, rngs=nnx.Rngs(0)), c, single_device_mesh())
    state = trainer.init_state()
    rng = np.random.default_rng(0)
    trajectories = [Trajectory(tokens=rng.integers(0, cfg.vocab_size, length).astype(np.int32),
                               loss_mask=(np.ones(length, np.float32) if loss == "all"
                                          else demo_loss_mask(length)),
                               behaviour_logprobs=np.zeros(length, np.float32), advantage=1.0)
                    for _ in range(rows)]
    micro, num_tokens = pack(trajectories, (length,), rows * length)
    if empty:  # rows of padding (segment 0, no loss), as a whole micro-batch used to carry
        micro = [jax.tree.map(lambda a: np.pad(a, ((0, empty), (0, 0))), m) for m in micro]
    times = []
    for _ in range(steps + 1):
        start = time.perf_counter()
        state, metrics = trainer.step(state, micro, num_tokens)
        jax.block_until_ready(state.params)
        times.append(time.perf_counter() - start)
    step_s = statistics.median(times[1:])
    return {"first_step_s": times[0], "step_s": step_s, "tokens_per_s": rows * length / step_s,
            "peak_rss_gb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20,
            "vocab_size": cfg.vocab_size, "tokens": rows * length,
            "loss_finite": bool(np.isfinite(metrics["loss"]))}


def measure(names: list[str], vocab: int, steps: int) -> dict[str, float]:
    """Runs each variant in its own process; its figures as NAME_KEY, and same-run ratios."""
    figures: dict[str, float] = {}
    for name in names:
        done = subprocess.run([sys.executable, "-m", "benchmarks.warm_start_step",
                               "--variant", name, "--vocab", str(vocab), "--steps", str(steps)],
                              capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"variant {name} failed:\n{done.stderr[-3000:]}")
        result = json.loads(done.stdout.strip().splitlines()[-1])
        for key, value in result.items():
            figures[f"{name}_{key}"] = value
        print(f"{name:>10}: {result['step_s']:6.1f} s/step ({result['tokens']} tokens, "
              f"{result['tokens_per_s']:5.0f} tok/s), first step {result['first_step_s']:5.1f} s, "
              f"peak RSS {result['peak_rss_gb']:4.1f} GB", flush=True)
    if {"demo_padded", "demo_cut"} <= set(names):
        figures["demo_cut_vs_padded_step"] = figures["demo_cut_step_s"] / figures[
            "demo_padded_step_s"]
        print(f"one demonstration, cut to its row against padded to 2 rows: "
              f"{figures['demo_cut_vs_padded_step']:.2f} of the step")
    if {"demo_all_positions", "demo_loss_positions"} <= set(names):
        figures["loss_positions_vs_all_step"] = figures["demo_loss_positions_step_s"] / figures[
            "demo_all_positions_step_s"]
        print(f"one demonstration, the vocabulary projected at its loss positions only against "
              f"at all: {figures['loss_positions_vs_all_step']:.2f} of the step")
    if {"full_vocab", "full_vocab_bf16"} <= set(names):
        figures["bf16_speedup_full_vocab"] = (figures["full_vocab_step_s"]
                                              / figures["full_vocab_bf16_step_s"])
        print(f"the warm start's step (whole vocabulary) in bf16 against fp32: "
              f"{figures['bf16_speedup_full_vocab']:.2f}x faster")
    if "pruned" in names:
        base = figures["pruned_step_s"]
        for name in names:
            if name != "pruned":
                # per-token time of the variant against `pruned` (>1: the variant is slower)
                figures[f"{name}_vs_pruned_time_per_token"] = (
                    figures[f"{name}_step_s"] / figures[f"{name}_tokens"]
                    / (base / figures["pruned_tokens"]))
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vocab", type=int, default=4308,
                        help="the pruned vocabulary's size (models/shrink.py on the demos)")
    parser.add_argument("--steps", type=int, default=2, help="timed steps after the first")
    parser.add_argument("--variant", help="run one variant here and print its JSON (internal)")
    parser.add_argument("--only", nargs="*", default=list(DEFAULT_VARIANTS),
                        choices=[*VARIANTS, "all"])
    args = parser.parse_args()
    if args.variant:
        print(json.dumps(run_variant(args.variant, args.vocab, args.steps)))
        return

    from benchmarks.machine_info import write_result

    names = list(VARIANTS) if "all" in args.only else args.only
    figures = {"vocab_pruned": args.vocab, "steps": args.steps,
               **measure(names, args.vocab, args.steps)}
    write_result("warm_start_step", figures)


if __name__ == "__main__":
    main()
