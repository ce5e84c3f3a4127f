"""The multi-host transport that a single process can check: message encoding and the
broadcast's chunking. (Several real processes: tests/launch/test_tpu_pod.)"""

import jax
import numpy as np
import pytest

from agentrl_jax.pipeline import multihost
from agentrl_jax.rl.batch import TrainBatch


def micro_batch(seed: int, with_ref: bool) -> TrainBatch:
    rng = np.random.default_rng(seed)
    ints = rng.integers(0, 100, (3, 8)).astype(np.int32)
    floats = rng.normal(size=(3, 8)).astype(np.float32)
    return TrainBatch(tokens=ints, positions=ints, segment_ids=ints, targets=ints,
                      loss_mask=floats, advantages=floats, behaviour_logprobs=floats,
                      reference_logprobs=floats if with_ref else None)


def test_messages_round_trip_without_pickles():
    batches = [micro_batch(0, True), micro_batch(1, False)]
    message = multihost.Message("step", {"count": 2, "num_loss_tokens": 12.0},
                                multihost.batch_arrays(batches))
    back = multihost.decode(multihost.encode(message))
    assert (back.kind, back.meta) == ("step", {"count": 2, "num_loss_tokens": 12.0})
    for a, b in zip(multihost.batches_from(back.arrays, 2), batches, strict=True):
        for field in ("tokens", "loss_mask", "reference_logprobs", "proximal_logprobs"):
            x, y = getattr(a, field), getattr(b, field)
            assert (x is None and y is None) or np.array_equal(x, y)


class SmallChunks(multihost.Channel):
    MIN_CHUNK = 64
    MAX_CHUNK = 256


def test_chunk_sizes_come_from_a_few_shapes():
    assert multihost.Channel._chunks(0) == []
    assert SmallChunks._chunks(1) == [64]
    assert SmallChunks._chunks(100) == [128]
    assert SmallChunks._chunks(600) == [256, 256, 128]
    assert sum(SmallChunks._chunks(10_000)) >= 10_000


@pytest.mark.parametrize("size", [0, 1, 255, 256, 1000])
def test_broadcast_delivers_the_bytes_intact(size):
    """On one process the leader's broadcast reaches itself: the same sums, rows and chunks."""
    channel = SmallChunks(jax.devices()[:4])
    data = np.random.default_rng(size).integers(0, 256, size).astype(np.uint8)
    np.testing.assert_array_equal(channel._transfer(data), data)
    with pytest.raises(RuntimeError):
        channel.receive()
