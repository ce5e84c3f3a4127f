"""A copy-forming stage before the warm start: sequences that only copying predicts.

A model trained from scratch on a few hundred demonstrations learns their format but not to
read its context: its calls name objects that are not in the room (issue #17,
docs/warm_start.md). Pretrained models copy names from their prompt with induction heads
(attend to the earlier occurrence of the current token, predict what followed it), which form
in pretraining on far more text than a warm start has. This stage trains that mechanism
directly, on sequences of the demonstrations' own tokens:

    context = s_1 s_2 … s_k          spans cut from random places of the demonstrations
    recall  = s_π(1) s_π(2) … s_π(m)  m of those spans again, in a random order

Only the recall is trained, and not the first token of each recalled span (nothing predicts
which span comes next, just as the policy chooses which name to write): every other recall
token is predicted exactly by finding the span's start in the context and copying what followed.
The spans come from the demonstrations' token stream, so the embeddings are trained on the
tokens the policy will read and write, and cut from random places, so the order of the context
carries no language model to lean on.

Whether it forms copying at a given budget is measured in docs/warm_start.md (at the default
warm start's, on this project's 2-core CPU, it does not).
"""

from __future__ import annotations

from collections.abc import Sequence

import ml_collections
import numpy as np

from agentrl_jax.dataclass_config import mutable_copy
from agentrl_jax.rl.batch import Trajectory


def default_config() -> ml_collections.ConfigDict:
    return ml_collections.ConfigDict(dict(
        sequences=0,  # synthetic copy sequences trained before the demonstrations; 0 = no stage
        length=512,  # tokens per sequence
        recall_share=0.4,  # share of a sequence's tokens that repeat spans of its context
        min_span=2,
        max_span=12,
        tokens_per_step=8192,
        learning_rate=2e-3,
    ))


def copy_sequence(stream: np.ndarray, length: int, recall_share: float, min_span: int,
                  max_span: int, rng: np.random.Generator) -> Trajectory:
    """One context-then-recall sequence of exactly `length` tokens cut from `stream`.

    The loss mask is 1 on every recall token but the first of each recalled span, 0 elsewhere.
    """
    if len(stream) < max_span or not min_span <= max_span:
        raise ValueError(f"need a stream of at least max_span = {max_span} tokens and "
                         f"min_span <= max_span, got {len(stream)} tokens, {min_span}..{max_span}")
    recall_len = int(length * recall_share)
    context_len = length - recall_len
    spans: list[np.ndarray] = []
    filled = 0
    while filled < context_len:
        size = min(int(rng.integers(min_span, max_span + 1)), context_len - filled)
        start = int(rng.integers(0, len(stream) - size + 1))
        spans.append(stream[start:start + size])
        filled += size
    tokens, mask = [np.concatenate(spans)], [np.zeros(context_len, np.float32)]
    filled = 0
    while filled < recall_len:
        span = spans[int(rng.integers(0, len(spans)))][:recall_len - filled]
        tokens.append(span)
        mask.append(np.r_[0.0, np.ones(len(span) - 1)].astype(np.float32))
        filled += len(span)
    ids = np.concatenate(tokens).astype(np.int32)
    return Trajectory(tokens=ids, loss_mask=np.concatenate(mask),
                      behaviour_logprobs=np.zeros(len(ids), np.float32), advantage=1.0)


def copy_sequences(trajectories: Sequence[Trajectory], config: ml_collections.ConfigDict,
                   seed: int) -> list[Trajectory]:
    """`config.sequences` copy sequences from the tokens of `trajectories` (seeded)."""
    stream = np.concatenate([np.asarray(t.tokens, np.int32) for t in trajectories])
    rng = np.random.default_rng(seed)
    return [copy_sequence(stream, config.length, config.recall_share, config.min_span,
                          config.max_span, rng) for _ in range(config.sequences)]


def stage_config(sft: ml_collections.ConfigDict) -> ml_collections.ConfigDict:
    """The `sft_stage.run_sft` config of the stage: one pass over the sequences with the warm
    start's optimizer at the stage's own learning rate and batch."""
    copy = sft.copy
    config = mutable_copy(sft)
    config.update(epochs=1, seq_buckets=(copy.length,), tokens_per_step=copy.tokens_per_step,
                  tokens_per_micro=min(copy.tokens_per_step, sft.tokens_per_micro))
    if "auto_buckets" in config:
        config.auto_buckets = 0   # the stage's sequences all have one length
    config.optimizer.learning_rate = copy.learning_rate
    return config
