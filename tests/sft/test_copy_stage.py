"""The copy stage's sequences: spans of the stream as context, then some of those spans again,
trained only where copying predicts the token; the warm start's config with the stage's own
batch and learning rate."""

import ml_collections
import numpy as np
import pytest

from agentrl_jax.rl.batch import Trajectory
from agentrl_jax.sft import copy_stage
from agentrl_jax.sft import stage as sft_stage


def contains(haystack: np.ndarray, needle: np.ndarray) -> bool:
    n = len(needle)
    return any(np.array_equal(haystack[i:i + n], needle) for i in range(len(haystack) - n + 1))


def recalled_spans(seq: Trajectory, context_len: int) -> list[np.ndarray]:
    """The recall split where the mask is 0 (the start of each recalled span)."""
    tokens, mask = np.asarray(seq.tokens), np.asarray(seq.loss_mask)
    starts = [i for i in range(context_len, len(tokens)) if mask[i] == 0]
    return [tokens[a:b] for a, b in zip(starts, [*starts[1:], len(tokens)], strict=True)]


def test_the_recall_repeats_spans_of_the_context_and_trains_all_but_their_first_tokens():
    stream = np.arange(1000, 1400, dtype=np.int32)   # every token distinct: spans are traceable
    rng = np.random.default_rng(0)
    seq = copy_stage.copy_sequence(stream, 256, 0.4, 2, 12, rng)
    context_len = 256 - int(256 * 0.4)
    tokens, mask = np.asarray(seq.tokens), np.asarray(seq.loss_mask)
    assert len(tokens) == len(mask) == 256
    assert not mask[:context_len].any()
    spans = recalled_spans(seq, context_len)
    assert len(spans) >= int(256 * 0.4) // 12
    for span in spans:
        assert contains(tokens[:context_len], span)        # a copy, not something new
    assert mask[context_len:].sum() == 256 - context_len - len(spans)
    # the context is cut from random places: its spans are not one run of the stream
    assert not contains(stream, tokens[:context_len])


def test_sequences_are_seeded_and_cut_from_the_demonstrations_tokens():
    demos = [Trajectory(tokens=np.arange(s, s + 50), loss_mask=np.ones(50),
                        behaviour_logprobs=np.zeros(50), advantage=1.0) for s in (0, 500)]
    config = copy_stage.default_config()
    config.update(sequences=3, length=64)
    first = copy_stage.copy_sequences(demos, config, seed=1)
    again = copy_stage.copy_sequences(demos, config, seed=1)
    other = copy_stage.copy_sequences(demos, config, seed=2)
    assert len(first) == 3
    assert all(np.array_equal(a.tokens, b.tokens) for a, b in zip(first, again, strict=True))
    assert not all(np.array_equal(a.tokens, b.tokens) for a, b in zip(first, other, strict=True))
    known = set(range(50)) | set(range(500, 550))
    assert all(set(np.asarray(s.tokens).tolist()) <= known for s in first)


def test_a_stream_shorter_than_a_span_is_refused():
    with pytest.raises(ValueError, match="max_span"):
        copy_stage.copy_sequence(np.arange(5), 64, 0.4, 2, 12, np.random.default_rng(0))


def test_the_stage_runs_with_the_warm_starts_optimizer_at_its_own_batch_and_rate():
    sft = sft_stage.default_config()
    sft.copy.update(length=256, tokens_per_step=4096, learning_rate=1e-3)
    config = copy_stage.stage_config(sft)
    assert (config.epochs, tuple(config.seq_buckets)) == (1, (256,))
    assert (config.tokens_per_step, config.tokens_per_micro) == (4096, 4096)
    assert config.optimizer.learning_rate == 1e-3
    assert config.optimizer.schedule == sft.optimizer.schedule
    assert sft.optimizer.learning_rate != 1e-3 and isinstance(config, ml_collections.ConfigDict)
