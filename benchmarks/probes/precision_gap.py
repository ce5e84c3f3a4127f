"""How far a bf16-compute trainer's log-probabilities are from the fp32 sampler's (issue #29).

The RL loss's ratio is π_θ / π_behav: the trainer's log-probability of each sampled token over
the sampler's. The CPU sampler computes in fp32. A trainer computing in bf16
(`rl.trainer.compute_dtype`, 1.5x a step here: `benchmarks/warm_start_step.py`) would see a
ratio that is not 1 even before its first update, and PPO clips tokens whose ratio is outside
1 ± `clip_eps`. This measures that gap where it matters: SmolLM2-135M-Instruct's real weights
(the model zoo), on the default config's oracle demonstrations of the five tasks, through
`rl.train_step.Trainer.logprobs` twice, in fp32 (what the sampler's log-probabilities match:
tests/sampling) and with `compute_dtype = "bfloat16"`. By default 4 demonstrations per task
(`--per_task`; the main job's `:fast` set), since each 4,096-token row costs seconds at 30 layers.

Reported over the assistant's tokens (what the loss reads) and over every token: the mean and
99th percentile of |Δ log p|, the share of tokens whose ratio exp(Δ) is outside 1 ± 0.2, and the
k3 estimate of KL(fp32 || bf16). About two minutes on a 2-core CPU.

    python -m benchmarks.probes.precision_gap [--per_task 4]
"""

from __future__ import annotations

import argparse

import jax
import numpy as np

CLIP_EPS = 0.2   # rl.losses' default clip_eps_low / clip_eps_high
ROW = 4096


def gap_figures(gap: np.ndarray, prefix: str) -> dict[str, float]:
    """Summary of per-token Δ = log p_bf16 - log p_fp32."""
    ratio = np.exp(gap)
    return {f"{prefix}_tokens": int(gap.size),
            f"{prefix}_mean_abs_logprob_gap": float(np.abs(gap).mean()),
            f"{prefix}_p99_abs_logprob_gap": float(np.quantile(np.abs(gap), 0.99)),
            f"{prefix}_mean_logprob_gap": float(gap.mean()),
            f"{prefix}_ratio_outside_clip": float((np.abs(ratio - 1) > CLIP_EPS).mean()),
            # k3: E[exp(-Δ) + Δ - 1] over tokens drawn from the fp32 policy's side of the pair
            f"{prefix}_kl_k3": float((np.exp(-gap) + gap - 1).mean())}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--per_task", type=int, default=4, help="oracle demonstrations per task")
    args = parser.parse_args()

    from transformers import AutoTokenizer

    from agentrl_jax import compile_cache
    from agentrl_jax.experiment import demonstrations
    from agentrl_jax.models.hf_io import load_hf
    from agentrl_jax.models.zoo import resolve_model_dir
    from agentrl_jax.parallel.mesh import single_device_mesh
    from agentrl_jax.rl import batch as batch_lib
    from agentrl_jax.rl import train_step
    from agentrl_jax.sft import demos as demos_lib
    from benchmarks.machine_info import write_result
    from configs import local_default

    compile_cache.enable()
    config = local_default.get_config()
    paths = [demonstrations.oracle_demos(t, config.demos.split, args.per_task)
             for t in config.env.tasks]
    directory = resolve_model_dir("smollm2-135m-instruct")
    tokenizer = AutoTokenizer.from_pretrained(directory)
    trajectories = [demos_lib.demo_trajectory(tokenizer, d)
                    for d in demos_lib.read_demos(paths)]
    trajectories = [t for t in trajectories if len(t.tokens) <= ROW]
    micro, _ = batch_lib.pack(trajectories, (ROW,), ROW)

    logprobs = {}
    for dtype in (None, "bfloat16"):
        c = train_step.default_config()
        c.update(seq_buckets=(ROW,), tokens_per_micro=ROW, compute_dtype=dtype)
        trainer = train_step.Trainer(load_hf(directory), c, single_device_mesh())
        params = trainer.init_state().params
        logprobs[dtype] = [np.asarray(jax.device_get(trainer.logprobs(params, m)[0]))
                           for m in micro]
    gap = np.concatenate([(b16 - f32).ravel() for b16, f32
                          in zip(logprobs["bfloat16"], logprobs[None], strict=True)])
    assistant = np.concatenate([np.asarray(m.loss_mask).ravel() > 0 for m in micro])
    every = np.concatenate([np.asarray(m.segment_ids).ravel() > 0 for m in micro])
    figures = {"demos": len(trajectories), "clip_eps": CLIP_EPS,
               **gap_figures(gap[assistant], "assistant"), **gap_figures(gap[every], "all")}
    for prefix in ("assistant", "all"):
        print(f"{prefix:>9} tokens ({figures[f'{prefix}_tokens']:,}): "
              f"mean |Δ log p| {figures[f'{prefix}_mean_abs_logprob_gap']:.4f}, "
              f"p99 {figures[f'{prefix}_p99_abs_logprob_gap']:.3f}, "
              f"ratio outside 1 ± {CLIP_EPS}: {figures[f'{prefix}_ratio_outside_clip']:.2%}, "
              f"KL {figures[f'{prefix}_kl_k3']:.2e}")
    print("wrote", write_result("precision_gap", figures))


if __name__ == "__main__":
    main()
