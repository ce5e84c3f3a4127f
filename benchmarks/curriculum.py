"""Benchmark: how many drawn groups carry a GRPO signal, plain stream vs learnability curriculum,
and what dynamic sampling costs in draws, on a simulated task population.

    python -m benchmarks.curriculum   # seconds; writes benchmarks/results/curriculum.json

No model: each train index has a fixed pass probability, drawn once from a population like the
one a weak policy meets (most indices never solved, a few always, the rest in between:
`UNSOLVED`, `SOLVED`, else uniform on [0.05, 0.95]), and a group is G Bernoulli episodes. The
stream, the curriculum (`pipeline.curriculum.LearnabilityCurriculum`) and the variance test
(`pipeline.batching.has_reward_variance`) are the real ones; the step loop mirrors the sync
runner's dynamic sampling (draw until `groups_per_step` groups have variance, at most
`max_draws_per_step` draws). Baseline and curriculum run on the same population and seeds, in
the same run; the figures are their ratios.
"""

from __future__ import annotations

import json

import numpy as np

from agentrl_jax.episode import SampleStatus
from agentrl_jax.pipeline import curriculum as curriculum_lib
from agentrl_jax.pipeline.batching import has_reward_variance
from agentrl_jax.rl import advantages
from agentrl_jax.rollout.record import Rollout
from benchmarks.machine_info import RESULTS_DIR, machine_info

TASKS, INDICES_PER_TASK = 5, 400
UNSOLVED, SOLVED = 0.7, 0.1
STEPS, GROUPS_PER_STEP, GROUP_SIZE, MAX_DRAWS = 300, 4, 4, 12


def population(seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    out = {}
    for t in range(TASKS):
        kind = rng.random(INDICES_PER_TASK)
        p = np.where(kind < UNSOLVED, 0.0, np.where(kind < UNSOLVED + SOLVED, 1.0,
                                                    rng.uniform(0.05, 0.95, INDICES_PER_TASK)))
        out[f"task{t}"] = p
    return out


def _group(task: str, index: int, passes: np.ndarray) -> list[Rollout]:
    tokens = np.arange(3, dtype=np.int32)
    mask = np.array([0, 1, 1], np.int32)
    return [Rollout(task, index, 0, m, tokens, mask, np.zeros(3, np.float32), mask, mask * 0,
                    reward=float(ok), status=SampleStatus.COMPLETED)
            for m, ok in enumerate(passes)]


def simulate(pass_prob: dict[str, np.ndarray], learnability: bool, seed: int) -> dict[str, float]:
    stream_config = curriculum_lib.default_config()
    stream_config.enabled = learnability
    stream = curriculum_lib.task_stream({t: list(range(len(p))) for t, p in pass_prob.items()},
                                        stream_config, seed)
    adv_config = advantages.default_config()
    rng = np.random.default_rng(seed + 1)
    drawn = informative = filled = 0
    for _ in range(STEPS):
        kept = draws = 0
        while kept < GROUPS_PER_STEP and draws < MAX_DRAWS:
            task, index = next(stream)
            passes = rng.random(GROUP_SIZE) < pass_prob[task][index]
            stream.observe(task, index, passes.tolist())
            draws += 1
            kept += has_reward_variance(_group(task, index, passes), adv_config)
        drawn += draws
        informative += kept
        filled += kept >= GROUPS_PER_STEP
    return {"informative_fraction": informative / drawn, "draws_per_step": drawn / STEPS,
            "steps_filled_fraction": filled / STEPS}


def main() -> dict[str, object]:
    pass_prob = population(0)
    plain = simulate(pass_prob, learnability=False, seed=0)
    learn = simulate(pass_prob, learnability=True, seed=0)
    result: dict[str, object] = {
        "simulated_steps": STEPS, "groups_per_step": GROUPS_PER_STEP, "group_size": GROUP_SIZE,
        "max_draws_per_step": MAX_DRAWS, "population_unsolved": UNSOLVED,
        "population_solved": SOLVED,
        **{f"plain_{k}": round(v, 4) for k, v in plain.items()},
        **{f"curriculum_{k}": round(v, 4) for k, v in learn.items()},
        "curriculum_vs_plain_informative_ratio": round(
            learn["informative_fraction"] / plain["informative_fraction"], 3),
        "curriculum_vs_plain_draws_per_step_ratio": round(
            learn["draws_per_step"] / plain["draws_per_step"], 3),
        **machine_info(),
    }
    RESULTS_DIR.mkdir(exist_ok=True)
    (RESULTS_DIR / "curriculum.json").write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result, indent=1))
    return result


if __name__ == "__main__":
    main()
