"""PrefillPlanner: the cheapest chunk lengths and rows per call, against hand counts and brute
force; and the engine computing the planned positions with unchanged outputs."""

import itertools

import pytest

from agentrl_jax.sampling import EngineConfig, GenerateRequest, SamplingParams
from agentrl_jax.sampling.prefill_plan import PrefillPlanner, bucket_of
from tests.sampling.conftest import make_engine, random_prompt, reference_greedy

BUCKETS, ROWS = (32, 128, 512), (1, 4)
HUGE = 10**6  # a call costs more than any padding: as few calls as possible


def plan_cost(lengths, buckets, call_tokens):
    return sum(bucket_of(buckets, n) + call_tokens for n in lengths)


@pytest.mark.parametrize("n, call_tokens, expected", [
    # 150 tokens: 128 + 22 (padded to 32) = 160 positions in two calls, against 512 in one
    (150, 32, (128, 22)),
    (150, 0, (128, 22)),       # five 32s also compute 160: ties go to fewer calls
    (150, HUGE, (150,)),       # one call, padded up to 512
    (600, 32, (512, 88)),      # 88 -> 128 (160) beats 32 + 32 + 24 (3 calls, 192)
    (1100, HUGE, (512, 512, 76)),  # over the largest bucket: chunks of it, the rest padded up
    (20, 32, (20,)),
    (0, 32, ()),
])
def test_chunk_lengths_by_hand(n, call_tokens, expected):
    assert PrefillPlanner(BUCKETS, ROWS, call_tokens).chunk_lengths(n) == expected


@pytest.mark.parametrize("call_tokens", [0, 3, 100])
def test_chunk_lengths_are_the_cheapest_cover(call_tokens):
    buckets = (4, 16, 64)
    planner = PrefillPlanner(buckets, ROWS, call_tokens)
    for n in range(1, 90):
        plan = planner.chunk_lengths(n)
        assert sum(plan) == n and all(0 < x <= 64 for x in plan)
        assert list(plan) == sorted(plan, reverse=True)
        # brute force: every multiset of buckets that covers n, at most 90 // 4 + 1 calls
        best = min(sum(c) + call_tokens * len(c)
                   for k in range(1, n // 4 + 2)
                   for c in itertools.combinations_with_replacement(buckets, k)
                   if sum(c) >= n and sum(c) - min(c) < n)
        assert plan_cost(plan, buckets, call_tokens) == best, n


def test_first_chunk_walks_an_optimal_plan():
    planner = PrefillPlanner(BUCKETS, ROWS, 32)
    left, taken = 1100, []
    while left:
        taken.append(planner.first_chunk(left))
        left -= taken[-1]
    assert plan_cost(taken, BUCKETS, 32) == plan_cost(planner.chunk_lengths(1100), BUCKETS, 32)
    assert planner.first_chunk(0) == 0


@pytest.mark.parametrize("n, call_tokens, max_tokens, expected", [
    (2, 32, 0, (1, 1)),        # 2 x (128 + 32) = 320 < one 4-row call, 512 + 32
    (3, 32, 0, (1, 1, 1)),     # 480 < 544
    (4, 32, 0, (4,)),          # 544 < 640
    (5, 32, 0, (4, 1)),
    (2, HUGE, 0, (4,)),        # as few calls as possible: empty rows are padding
    (4, HUGE, 256, (1, 1, 1, 1)),  # 4 x 128 over the cap: one row a call
])
def test_row_counts_by_hand(n, call_tokens, max_tokens, expected):
    planner = PrefillPlanner(BUCKETS, ROWS, call_tokens, EngineConfig(
        max_batch=4, prefill_batch_buckets=ROWS, max_prefill_tokens=max_tokens).prefill_call_fits)
    assert planner.row_counts(n, 128) == expected


def test_negative_call_cost_is_rejected():
    with pytest.raises(ValueError, match="call_tokens"):
        PrefillPlanner(BUCKETS, ROWS, -1)


@pytest.mark.parametrize("call_tokens, positions, calls", [(0, 8, 2), (HUGE, 16, 1)])
def test_engine_prefills_the_planned_positions(llama, call_tokens, positions, calls):
    # A continuation of 6 new tokens with buckets (4, 16): cut into 4 + 2 (8 positions, two
    # calls) or padded up to 16 in one; greedy outputs equal the reference either way.
    engine = make_engine(llama, prefill_buckets=(4, 16), prefill_call_tokens=call_tokens)
    greedy = SamplingParams(temperature=0.0, max_new_tokens=3)
    prompt = random_prompt(16, 1)
    first = engine.generate([GenerateRequest(prompt, greedy, session_id="s")])[0]
    stream = prompt + first.tokens + random_prompt(5, 2)  # 6 tokens beyond the cached 16
    before, calls_before = engine.prefill_stats(), engine.stats["prefill_calls"]
    second = engine.generate([GenerateRequest(stream, greedy, session_id="s")])[0]
    after = engine.prefill_stats()
    assert after["prefill_tokens_computed"] - before["prefill_tokens_computed"] == 6
    assert after["prefill_positions_computed"] - before["prefill_positions_computed"] == positions
    assert engine.stats["prefill_calls"] - calls_before == calls
    assert second.tokens == reference_greedy(llama, stream, 3)
