"""Packing trajectories into fixed-shape micro-batches."""

import numpy as np
import pytest

from agentrl_jax.rl import batch as batch_lib


def traj(tokens, mask, adv=1.0, weight=1.0):
    n = len(tokens)
    return batch_lib.Trajectory(
        tokens=tokens, loss_mask=mask, behaviour_logprobs=-np.arange(n, dtype=float) / 10,
        advantage=adv, weight=weight,
    )


def test_pick_bucket():
    assert batch_lib.pick_bucket(5, (8, 4, 16)) == 8
    assert batch_lib.pick_bucket(8, (4, 8)) == 8
    with pytest.raises(ValueError):
        batch_lib.pick_bucket(9, (4, 8))


def test_pack_shift_segments_and_fields():
    # lengths after the shift: 4, 3, 1 -> bucket 4; rows: [a], [b, c]
    a = traj([1, 2, 3, 4, 5], [0, 0, 1, 1, 1], adv=2.0)
    b = traj([6, 7, 8, 9], [0, 1, 1, 0], adv=-1.0, weight=0.5)
    c = traj([10, 11], [0, 1], adv=3.0)
    micro, n_tokens = batch_lib.pack([a, b, c], seq_buckets=(4, 8), tokens_per_micro=8)
    assert len(micro) == 1 and micro[0].shape == (2, 4)
    mb = micro[0]
    np.testing.assert_array_equal(mb.tokens, [[1, 2, 3, 4], [6, 7, 8, 10]])
    np.testing.assert_array_equal(mb.targets, [[2, 3, 4, 5], [7, 8, 9, 11]])
    np.testing.assert_array_equal(mb.positions, [[0, 1, 2, 3], [0, 1, 2, 0]])
    np.testing.assert_array_equal(mb.segment_ids, [[1, 1, 1, 1], [1, 1, 1, 2]])
    np.testing.assert_allclose(mb.loss_mask, [[0, 1, 1, 1], [0.5, 0.5, 0, 1]])
    np.testing.assert_allclose(mb.advantages, [[2, 2, 2, 2], [-1, -1, -1, 3]])
    np.testing.assert_allclose(mb.behaviour_logprobs, [[-0.1, -0.2, -0.3, -0.4],
                                                      [-0.1, -0.2, -0.3, -0.1]], rtol=1e-6)
    assert n_tokens == 3 + 1.0 + 1
    assert mb.proximal_logprobs is None and mb.reference_logprobs is None


def test_pack_pads_rows_to_whole_micro_batches():
    trajs = [traj(list(range(9)), [1] * 9) for _ in range(5)]  # 5 rows of 8
    micro, n = batch_lib.pack(trajs, (8,), tokens_per_micro=16, row_multiple=2)
    assert [m.shape for m in micro] == [(2, 8)] * 3
    assert micro[-1].segment_ids[1].sum() == 0  # the padding row
    assert n == 5 * 8


@pytest.mark.parametrize("num_rows,per_micro,multiple,sizes", [
    (1, 4, 1, [1]), (3, 4, 1, [4]), (5, 4, 1, [4, 1]), (6, 8, 1, [8]), (11, 4, 1, [4, 4, 4]),
    (9, 8, 2, [8, 2]), (1, 4, 4, [4]), (8, 4, 1, [4, 4]), (2, 16, 1, [2])])
def test_micro_batch_rows_cuts_the_last_to_a_power_of_two(num_rows, per_micro, multiple, sizes):
    assert batch_lib.micro_batch_rows(num_rows, per_micro, multiple) == sizes


def test_pack_computes_no_empty_micro_batch_rows():
    # one 7-input trajectory, a budget of 4 rows of 8: one row, not four
    micro, n = batch_lib.pack([traj(list(range(8)), [1] * 8)], (8,), tokens_per_micro=32)
    assert [m.shape for m in micro] == [(1, 8)] and n == 7
    # five rows at 2 per micro-batch: 2 + 2 + 1, the gradient is the same token mean
    trajs = [traj(list(range(9)), [1] * 9) for _ in range(5)]
    micro, n = batch_lib.pack(trajs, (8,), tokens_per_micro=16)
    assert [m.shape for m in micro] == [(2, 8), (2, 8), (1, 8)]
    assert sum(float(m.loss_mask.sum()) for m in micro) == n == 40


@pytest.mark.parametrize("lengths,seq_len,budget,multiple", [
    ([8, 8, 8, 8, 8], 8, 16, 2), ([3, 2, 5, 1, 7, 4], 8, 24, 1), ([30, 1, 1], 32, 16, 4)])
def test_pack_rows_counts_the_rows_pack_makes(lengths, seq_len, budget, multiple):
    trajs = [traj(list(range(n + 1)), [1] * (n + 1)) for n in lengths]
    micro, _ = batch_lib.pack(trajs, (seq_len,), tokens_per_micro=budget, row_multiple=multiple)
    rows = sum(m.shape[0] for m in micro)
    assert batch_lib.pack_rows(lengths, seq_len, budget, multiple) == rows
    assert micro[0].shape[0] == batch_lib.micro_rows(seq_len, budget, multiple)


def test_loss_positions_list_each_rows_loss_tokens_padded_with_the_row_length():
    mask = np.zeros((2, 32), np.float32)
    mask[0, [3, 4, 20]] = 1.0
    mask[1, [0, 31]] = 0.5  # a trajectory weight, still a loss position
    at = batch_lib.loss_positions(mask, min_width=2)
    assert at.shape == (2, 4)  # 32 / 2^3 holds the largest count, 3
    np.testing.assert_array_equal(at, [[3, 4, 20, 32], [0, 31, 32, 32]])
    assert batch_lib.loss_positions(mask, min_width=8).shape == (2, 8)


def test_loss_positions_are_none_when_the_loss_reads_most_of_a_row():
    mask = np.zeros((1, 32), np.float32)
    mask[0, :17] = 1.0  # 17 > 32 / 2: no narrower width holds it
    assert batch_lib.loss_positions(mask, min_width=2) is None
    assert batch_lib.loss_positions(np.ones((1, 8), np.float32), min_width=64) is None
    assert batch_lib.loss_positions(np.zeros((1, 24), np.float32), min_width=4).shape == (1, 6)
