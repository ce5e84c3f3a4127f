"""The warm start's step plan and the row lengths chosen for it (sft/plan.py)."""

import random

import pytest

from agentrl_jax.models.config import ModelConfig
from agentrl_jax.rl.batch import pick_bucket
from agentrl_jax.sft import plan


def test_plan_steps_groups_by_bucket_and_covers_every_epoch():
    lengths = [100, 900, 120, 1000, 300, 80]
    steps = plan.plan_steps(lengths, (256, 1024), tokens_per_step=1000, epochs=2, seed=1)
    seen = sorted(i for s in steps for i in s)
    assert seen == sorted(list(range(6)) * 2)
    for members in steps:   # one row length per step
        assert len({256 if lengths[i] - 1 <= 256 else 1024 for i in members}) == 1
    assert steps == plan.plan_steps(lengths, (256, 1024), 1000, 2, seed=1)


def _lengths(seed=0):
    """Two clusters, like the tasks' demonstrations: short episodes and long ones."""
    rng = random.Random(seed)
    return ([rng.randint(300, 700) for _ in range(60)]
            + [rng.randint(1800, 2300) for _ in range(30)] + [3900])


def test_plan_cost_by_hand():
    # two steps: {0, 1} at T=256 with budget 512 -> 2 rows per micro, inputs 99+199 fit one row
    # -> 2 rows (one padding); {2} at T=1024 -> 1 row
    lengths = [100, 200, 1000]
    steps = [[0, 1], [2]]
    w = 0.01
    expected = 2 * 256 * (1 + w * 256) + 1 * 1024 * (1 + w * 1024)
    assert plan.plan_cost(lengths, (256, 1024), steps, 512, 1, w) == pytest.approx(expected)


def test_choose_buckets_holds_every_length_and_costs_no_more_than_hand_buckets():
    lengths = _lengths()
    kwargs = dict(tokens_per_step=8192, tokens_per_micro=4096, weight=1e-3, seed=0)
    for count in (1, 2, 3, 4):
        buckets = plan.choose_buckets(lengths, count, **kwargs)
        assert 1 <= len(buckets) <= count and list(buckets) == sorted(set(buckets))
        assert all(b % 128 == 0 for b in buckets)
        assert all(pick_bucket(n - 1, buckets) for n in lengths)   # raises if one does not fit
        assert buckets[-1] == 3968                                 # 3899 rounded up to 128
        assert buckets == plan.choose_buckets(lengths, count, **kwargs)

    def cost(buckets):
        steps = plan.plan_steps(lengths, buckets, 8192, 1, 0)
        return plan.plan_cost(lengths, buckets, steps, 4096, 1, 1e-3)

    hand = (1024, 2048, 4096)
    chosen = plan.choose_buckets(lengths, 3, **kwargs)
    assert cost(chosen) <= cost(hand)
    assert cost(chosen) < cost((3968,))   # splitting the clusters pays
    assert chosen[0] < 1024               # the short cluster gets a row length of its own


def test_choose_buckets_rejects_empty_input():
    with pytest.raises(ValueError):
        plan.choose_buckets([], 2, tokens_per_step=10, tokens_per_micro=10, weight=0, seed=0)
    with pytest.raises(ValueError):
        plan.choose_buckets([5], 0, tokens_per_step=10, tokens_per_micro=10, weight=0, seed=0)


def test_attention_weight_is_layers_times_query_width_over_parameters():
    cfg = ModelConfig(vocab_size=256, hidden_size=64, num_layers=2, num_heads=4, num_kv_heads=2,
                      head_dim=16, intermediate_size=128)
    assert plan.attention_weight(cfg) == pytest.approx(2 * 64 / cfg.num_params())
