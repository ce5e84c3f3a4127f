"""What a caller sends the sampling engine and what it gets back.

Log-probability convention: `GenerationResult.logprobs[i]` is log p(token_i) under the
temperature-scaled distribution softmax(logits / T) over the whole vocabulary, computed before
top-k / top-p truncation. That is exactly what the trainer recomputes with
`models.logprobs.token_logprobs(..., temperature=T)`, so importance ratios start at 1. Greedy
decoding (T = 0) reports log-probabilities under T = 1.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Sequence

from agentrl_jax.sampling.constraint import TokenConstraint


class FinishReason(enum.StrEnum):
    STOP = "stop"  # a stop token id was sampled or a stop string appeared
    LENGTH = "length"  # max_new_tokens or the engine's context limit was reached
    ABORTED = "aborted"  # the request was cancelled


@dataclasses.dataclass(frozen=True)
class SamplingParams:
    """How to sample one turn.

    Attributes:
      temperature: 0 means greedy.
      top_p: nucleus sampling mass (1.0 disables it); applied after top-k, as HF does.
      top_k: keep the k most likely tokens (0 disables it).
      max_new_tokens: generation stops after this many tokens (finish reason "length").
      stop_token_ids: sampling one of these ends the turn; the token is kept in the output.
      stop_strings: the turn ends once the detokenized output contains one; the output keeps the
        tokens up to and including the one that completed it. Needs the engine's `decode_fn`.
      seed: the random stream; token i of a sequence uses fold_in(key(seed), position of i), so
        results do not depend on batching, chunking or cache reuse. None picks a fresh seed.
    """

    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    max_new_tokens: int = 128
    stop_token_ids: Sequence[int] = ()
    stop_strings: Sequence[str] = ()
    seed: int | None = None

    def __post_init__(self):
        if self.temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        if self.top_k < 0:
            raise ValueError(f"top_k must be >= 0, got {self.top_k}")
        if self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {self.max_new_tokens}")


@dataclasses.dataclass(frozen=True)
class GenerateRequest:
    """One turn to generate.

    Attributes:
      prompt: the whole token stream of the conversation so far (token-in, token-out). With a
        `session_id`, the engine reuses the cached KV of the longest prefix it still holds for
        that session and prefills only the rest.
      params: sampling parameters.
      policy: name of the policy in the engine's pool that generates this turn.
      session_id: an episode's id, to keep its KV cache between turns; None for one-off requests.
      constraint: the turn's grammar (`constraint.TokenConstraint`), stateful: one per
        request. Its tokens' log-probabilities are then under the masked distribution.
    """

    prompt: Sequence[int]
    params: SamplingParams = SamplingParams()
    policy: str = "current"
    session_id: str | None = None
    constraint: TokenConstraint | None = None


@dataclasses.dataclass(frozen=True)
class TokenEvent:
    """Tokens a running turn has sampled since its previous event (streaming).

    The engine reports them at each host sync (the prefill's first token, then every
    `steps_per_sync` decode steps), after stop ids and stop strings are applied, so no token
    reported is ever cut off later and the events of a turn come before its result. A consumer
    keeps `tokens[start:] = event.tokens`: `start` is where `event.tokens` begin in the turn's
    tokens, which is the count reported so far, except after a restart on new weights
    (`EngineConfig.in_flight="abort"`), which starts again from 0. Kept so, the consumer's
    tokens and log-probabilities equal the result's.

    Attributes:
      start: index in the turn's generated tokens of `tokens[0]`.
      tokens: the new token ids.
      logprobs: their log-probabilities (the module docstring's convention).
      version: params version of the policy that sampled them.
    """

    start: int
    tokens: list[int]
    logprobs: list[float]
    version: int


@dataclasses.dataclass
class GenerationResult:
    """The outcome of one request.

    Attributes:
      tokens: generated token ids.
      logprobs: per-token log-probabilities (see the module docstring for the convention).
      versions: params version of the policy that produced each token.
      policy: name of the policy that generated the turn.
      finish_reason: why generation stopped.
      stop_string: the stop string that ended the turn, if any.
      num_prompt_tokens: len(prompt).
      num_reused_tokens: prompt tokens whose KV came from the session cache (not prefilled).
    """

    tokens: list[int]
    logprobs: list[float]
    versions: list[int]
    policy: str
    finish_reason: FinishReason
    stop_string: str | None = None
    num_prompt_tokens: int = 0
    num_reused_tokens: int = 0
