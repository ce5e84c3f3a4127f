"""Grammar constraints on a turn's tokens: which tokens may come next, as a bitmask.

A request may carry a `TokenConstraint`. Before each token of its turn the engine asks it for
the allowed tokens as a bitmask (token t is allowed when bit t % 32 of word t // 32 is set),
sets the logits of the others to -inf on device, samples, and tells the constraint the token
drawn (`consume`). The token's log-probability is then under the masked distribution,
softmax over the allowed tokens of logits / T: the distribution it was really drawn from.

`Grammar` is such a constraint over llguidance's matcher (a JSON schema or a Lark grammar,
compiled against the policy's tokenizer by a `GrammarCompiler`). llguidance was chosen over
xgrammar, both measured on SmolLM2's 49,152-token vocabulary with a two-field JSON schema on
the 2-core CPU: a mask took 0.056 ms (median) against xgrammar's 0.007, a grammar 13 ms against
30, both far below a decode step (milliseconds to a tenth of a second here); but xgrammar
requires torch, triton and transformers at run time and hands its masks over as torch tensors,
and a JAX sampler on a TPU host should not carry torch. llguidance has no dependencies.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, Protocol

import numpy as np


class ConstraintError(ValueError):
    """A grammar that cannot be compiled, or a constrained turn that cannot go on."""


def bitmask_words(vocab_size: int) -> int:
    """int32 words of a bitmask over `vocab_size` tokens."""
    return (vocab_size + 31) // 32


class TokenConstraint(Protocol):
    """The state of one turn's grammar (used by the engine's thread only)."""

    def fill_bitmask(self, out: np.ndarray) -> None:
        """Writes the tokens allowed next into `out`, int32 [bitmask_words(vocab)]."""

    def consume(self, token: int) -> None:
        """Advances past `token`, which the last bitmask allowed."""

    def reset(self) -> None:
        """Back to the start of the turn (its tokens were discarded)."""


class Grammar:
    """llguidance's matcher for one turn: built by `GrammarCompiler`, used once.

    Its masks cover the compiler's vocabulary; the words of a wider `out` (a model whose
    logits outnumber the tokenizer's ids) stay 0: those ids are never allowed.
    """

    def __init__(self, matcher: Any, words: int):
        self._matcher, self._words = matcher, words

    def fill_bitmask(self, out: np.ndarray) -> None:
        import llguidance.numpy

        if out.size < self._words:
            raise ConstraintError(f"a bitmask of {out.size} words cannot hold the grammar's "
                                  f"{self._words}: the tokenizer has more ids than the model")
        out[self._words:] = 0
        llguidance.numpy.fill_next_token_bitmask(self._matcher, out[None, :self._words])
        if self._matcher.is_error():
            raise ConstraintError(f"grammar failed: {self._matcher.get_error()}")
        if not out.any():
            raise ConstraintError("the grammar allows no token here")

    def consume(self, token: int) -> None:
        if not self._matcher.consume_token(int(token)):
            raise ConstraintError(f"token {token} rejected by the grammar: "
                                  f"{self._matcher.get_error()}")

    def reset(self) -> None:
        self._matcher.reset()


class GrammarCompiler:
    """Builds `Grammar`s for one tokenizer (its llguidance view is built once: ~1 s for a
    49k-token vocabulary).

    Args:
      tokenizer: the policy's HF tokenizer (a fast tokenizer).
      end_ids: the tokens that end a turn; the grammar allows them once it is complete.
    """

    def __init__(self, tokenizer: Any, end_ids: Sequence[int]):
        import llguidance
        import llguidance.hf

        self._llg = llguidance
        self._words = bitmask_words(len(tokenizer))
        self._tokenizer = llguidance.hf.from_tokenizer(
            tokenizer, n_vocab=len(tokenizer), eos_token=[int(i) for i in end_ids])

    def json_schema(self, schema: dict[str, Any]) -> Grammar:
        """A grammar of JSON documents valid under `schema`."""
        return self.lark("start: %json " + json.dumps(schema))

    def literal(self, text: str) -> str:
        """`text` as a Lark grammar writes it: a string, or the token `<[id]>` where the
        tokenizer writes it as one token that llguidance treats as special (no string matches
        such a token: Qwen2.5's and Hermes' `<tool_call>`)."""
        ids = self._tokenizer.tokenize_str(text)
        if len(ids) == 1 and self._tokenizer.is_special_token(ids[0]):
            return f"<[{ids[0]}]>"
        return json.dumps(text)

    def lark(self, grammar: str) -> Grammar:
        """A grammar in llguidance's Lark syntax; ConstraintError if it does not compile."""
        matcher = self._llg.LLMatcher(self._tokenizer,
                                      self._llg.LLMatcher.grammar_from_lark(grammar),
                                      log_level=0)
        if matcher.is_error():   # it compiles the grammar once, here
            raise ConstraintError(matcher.get_error())
        return Grammar(matcher, self._words)
