"""DecodePlanner: rows split into decode calls by context, against hand counts and every
partition; and the engine reading the planned context with unchanged outputs."""


import numpy as np
import pytest

from agentrl_jax.sampling import GenerateRequest, SamplingParams
from agentrl_jax.sampling.decode_plan import DecodePlanner, call_tokens_of
from agentrl_jax.sampling.prefill_plan import bucket_of
from tests.sampling.conftest import make_engine, random_prompt, reference_greedy

WIDTHS, ROWS = (16, 32, 64), (1, 2, 4)
HUGE = 10**6  # a call costs more than any context: one call for every row


def plan_cost(planner, needs, groups):
    return sum(planner.call_cost(len(g), max(bucket_of(WIDTHS, needs[i]) for i in g))
               for g in groups)


@pytest.mark.parametrize("needs, call_tokens, expected", [
    ([10, 60], 0, [[0], [1]]),         # 16 + 64 read against 2 x 64
    ([10, 60], 40, [[0], [1]]),        # 80 + 2 x 40 = 160 against 128 + 40
    ([10, 60], 50, [[0, 1]]),          # 180 against 178
    ([60, 10], HUGE, [[1, 0]]),        # one call; shortest context first
    ([60, 50, 10, 12], 0, [[2, 3], [1, 0]]),  # 2 x 16 + 2 x 64
    # One context bucket, 3 rows: in one call they pad to the 4-row bucket (4 x 16 + c);
    # 1 + 2 rows read 16 + 32 (+ 2c), as do 1 + 1 + 1 in more calls.
    ([10, 12, 14], 10, [[0], [1, 2]]),   # 68 against 74
    ([10, 12, 14], 20, [[0, 1, 2]]),     # 88 against 84
])
def test_groups_by_hand(needs, call_tokens, expected):
    assert DecodePlanner(WIDTHS, ROWS, call_tokens).groups(needs) == expected


def set_partitions(items):
    if not items:
        yield []
        return
    first, rest = items[0], items[1:]
    for part in set_partitions(rest):
        for i in range(len(part)):
            yield part[:i] + [[first, *part[i]]] + part[i + 1:]
        yield [[first], *part]


@pytest.mark.parametrize("call_tokens", [0, 20, 70, HUGE])
def test_groups_are_the_cheapest_of_every_partition(call_tokens):
    # Runs of the sorted rows suffice: the planner's cost is the least over all set partitions.
    planner = DecodePlanner(WIDTHS, ROWS, call_tokens)
    rng = np.random.default_rng(0)
    for _ in range(40):
        needs = rng.integers(1, 70, int(rng.integers(1, 7))).tolist()
        groups = planner.groups(needs)
        assert sorted(i for g in groups for i in g) == list(range(len(needs)))
        assert all(len(g) <= ROWS[-1] for g in groups)
        best = min(plan_cost(planner, needs, p) for p in set_partitions(list(range(len(needs))))
                   if all(len(g) <= ROWS[-1] for g in p))
        assert plan_cost(planner, needs, groups) == best


def test_call_tokens_of_is_weights_over_context_reads():
    # 17 MB of weights, 4 KB of k/v a token read twice a step: ~2,100 row-tokens
    assert call_tokens_of(17_000_000, 4096) == 2075
    with pytest.raises(ValueError):
        DecodePlanner(WIDTHS, ROWS, -1)


@pytest.mark.parametrize("call_tokens, context_tokens", [(0, 16 + 64), (HUGE, 2 * 64)])
def test_engine_reads_the_planned_context(llama, call_tokens, context_tokens):
    # A 5-token and a 40-token prompt decode together: split, a step reads 16 + 64 row-tokens of
    # context (two calls); in one call, 2 x 64. Greedy outputs equal the reference either way.
    engine = make_engine(llama, decode_call_tokens=call_tokens)
    greedy = SamplingParams(temperature=0.0, max_new_tokens=3)
    prompts = [random_prompt(5, 1), random_prompt(40, 2)]
    results = engine.generate([GenerateRequest(p, greedy) for p in prompts])
    # The first token comes from prefill; the other two from one decode chunk (3 steps).
    assert engine.stats["decode_context_tokens"] == context_tokens
    assert engine.stats["decode_chunks"] == (2 if call_tokens == 0 else 1)
    for prompt, result in zip(prompts, results, strict=True):
        assert result.tokens == reference_greedy(llama, prompt, 3)
