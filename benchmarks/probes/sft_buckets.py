"""The warm start's row lengths: the default's hand-picked buckets against `sft/plan.py`'s choice.

On the main job's own demonstrations (the default config's: `demos.per_task` oracle episodes
per task, played and cached as `launch.local` does, with the copy swaps it trains on) tokenized
by the scratch policy's tokenizer, for the hand buckets (`sft.seq_buckets`) and for
`choose_buckets` at 2 to 5 row lengths: the steps `plan_steps` makes, the shapes they use (one
compilation each), the padded tokens, and the modelled compute (`plan.plan_cost`: forward
FLOPs / 2N, attention included). The figures are modelled, not timed: `autoK_vs_hand_cost`.

    python -m benchmarks.probes.sft_buckets        # writes benchmarks/results/sft_buckets.json
"""

from __future__ import annotations

from agentrl_jax.experiment import demonstrations
from agentrl_jax.experiment import policy as policy_lib
from agentrl_jax.sft import copy_swap, plan
from agentrl_jax.sft import demos as demos_lib
from benchmarks.machine_info import write_result
from configs import local_default


def demo_lengths(config) -> tuple[list[int], float]:
    """Token lengths of the warm start's demonstrations and the model's attention weight."""
    paths = [demonstrations.oracle_demos(t, config.demos.split, config.demos.per_task)
             for t in config.env.tasks]
    demos = list(demos_lib.read_demos(paths))
    policy = policy_lib.new_scratch_policy(config.model, demos_lib.demo_texts(demos))
    trained = copy_swap.with_swaps(demos, config.sft.copy_swap_fraction, config.sft.seed)
    lengths = [len(demos_lib.demo_trajectory(policy.tokenizer, d, policy.end_of_turn_ids,
                                             config.sft.context_loss_weight)) for d in trained]
    return ([n for n in lengths if n <= config.demos.max_tokens],
            plan.attention_weight(policy.model.cfg))


def plan_figures(lengths: list[int], buckets: tuple[int, ...], sft, weight: float) -> dict:
    steps = plan.plan_steps(lengths, buckets, sft.tokens_per_step, sft.epochs, sft.seed)
    shapes = plan.step_shapes(lengths, buckets, steps, sft.tokens_per_micro)
    padded = sum(rows * seq_len for rows, seq_len in shapes)
    return {"buckets": " ".join(map(str, buckets)), "shapes": len({t for _, t in shapes}),
            "steps": len(steps), "padded_tokens": padded,
            "padding_share": 1 - sum(lengths[i] - 1 for m in steps for i in m) / padded,
            "cost": plan.plan_cost(lengths, buckets, steps, sft.tokens_per_micro, 1, weight)}


def main() -> None:
    config = local_default.get_config()
    sft = config.sft
    lengths, weight = demo_lengths(config)
    plans = {"hand": plan_figures(lengths, tuple(sft.seq_buckets), sft, weight)}
    for k in (2, 3, 4, 5):
        buckets = plan.choose_buckets(lengths, k, tokens_per_step=sft.tokens_per_step,
                                      tokens_per_micro=sft.tokens_per_micro, weight=weight,
                                      seed=sft.seed)
        plans[f"auto{k}"] = plan_figures(lengths, buckets, sft, weight)
    figures: dict[str, object] = {"demos": len(lengths), "demo_tokens": sum(lengths),
                                  "attention_weight": weight}
    for name, p in plans.items():
        print(f"{name:6s} {p['buckets']:28s} shapes {p['shapes']}  steps {p['steps']}  "
              f"padding {p['padding_share']:.1%}  cost {p['cost'] / plans['hand']['cost']:.3f}")
        figures.update({f"{name}_{k}": v for k, v in p.items()})
        if name != "hand":
            figures[f"{name}_vs_hand_cost"] = p["cost"] / plans["hand"]["cost"]
    print("wrote", write_result("sft_buckets", figures))


if __name__ == "__main__":
    main()
