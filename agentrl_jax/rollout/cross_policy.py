"""Cross-policy sampling: which policy of the pool generates each turn.

AgentRL's training pool is {current policy, stale snapshot refreshed every K steps}; each
generation call (each turn) goes to the stale one with probability `stale_ratio` (0.25). Any
number of named policies sharing the tokenizer can be mixed the same way. Every sampled token
records the policy (its index in `names`) and weight version that produced it.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Mapping

TRAINED_POLICY = "current"  # the policy being trained, refreshed after every step
STALE_POLICY = "stale"  # AgentRL's snapshot of it, refreshed every K steps


@dataclasses.dataclass(frozen=True)
class PolicyMix:
    """Per-turn choice among named policies with fixed weights (normalised on use)."""

    weights: Mapping[str, float]

    def __post_init__(self):
        if not self.weights:
            raise ValueError("a policy mix needs at least one policy")
        if any(w < 0 for w in self.weights.values()) or sum(self.weights.values()) <= 0:
            raise ValueError(f"policy weights must be >= 0 with a positive sum: {self.weights}")

    @classmethod
    def single(cls, name: str = TRAINED_POLICY) -> PolicyMix:
        return cls({name: 1.0})

    @classmethod
    def current_and_stale(cls, stale_ratio: float) -> PolicyMix:
        if stale_ratio <= 0:
            return cls.single()
        return cls({TRAINED_POLICY: 1.0 - stale_ratio, STALE_POLICY: stale_ratio})

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(self.weights)

    def policy_id(self, name: str) -> int:
        """The id tokens of policy `name` record (its position in `names`)."""
        if name not in self.weights:
            raise ValueError(f"policy {name!r} is not in the mix {self.names}")
        return self.names.index(name)

    def choose(self, rng: random.Random) -> str:
        names = [n for n in self.names if self.weights[n] > 0]
        return rng.choices(names, weights=[self.weights[n] for n in names])[0]
