"""`EnginePolicy`: a model from the zoo (or an HF directory) answering through our JAX engine.

Each request renders the whole conversation through the model's chat template (tools included,
see chat/templates.py) and generates one assistant turn with the `AsyncSamplingEngine`. The
conversation is re-rendered rather than extended token by token because BFCL changes the tool
list mid-conversation (miss_func), which rewrites the system prompt; with the episode's
`session_id` the engine still reuses the KV cache of the longest unchanged prefix.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from agentrl_jax.chat import templates
from agentrl_jax.evaluation.bfcl import PromptTooLongError
from agentrl_jax.evaluation.bfcl_data import Message
from agentrl_jax.sampling import (
    AsyncSamplingEngine,
    EngineConfig,
    GenerateRequest,
    SamplingEngine,
    SamplingParams,
)

# GLM-4-0414 ends a turn with the role token that comes next rather than with its eos.
_GLM4_TURN_ENDS = ("<|user|>", "<|observation|>", "<|endoftext|>")


def default_engine_config(max_context: int, max_batch: int = 4) -> EngineConfig:
    """Few shape buckets (each one compiles once): BFCL prompts run from ~200 to ~8k tokens."""
    page = 16
    max_context = -(-max_context // page) * page
    return EngineConfig(
        max_batch=max_batch, page_size=page, num_pages=max_batch * max_context // page + 8,
        max_context=max_context, prefill_buckets=(512, 2048), context_buckets=(1024, 4096),
        batch_buckets=(1, max_batch), steps_per_sync=16,
    )


class EnginePolicy:
    """Greedy (by default) generation of a zoo model or HF model directory, in its chat format."""

    def __init__(
        self,
        model: str,
        *,
        max_new_tokens: int = 512,
        temperature: float = 0.0,
        max_context: int | None = None,
        max_batch: int = 4,
        engine_config: EngineConfig | None = None,
        tool_parser: str | None = None,
    ):
        """Args:
          model: a zoo name (`models.zoo`) or an HF model directory.
          max_new_tokens: per assistant turn.
          temperature: 0 is greedy.
          max_context: tokens of prompt + reply (default: the model's position limit).
          max_batch: turns decoded at once.
          engine_config: overrides the engine sizes derived from the two above.
          tool_parser: the call format; default glm4 for GLM-4 models, else hermes.
        """
        from transformers import AutoTokenizer

        from agentrl_jax.models.hf_io import load_hf
        from agentrl_jax.models.zoo import resolve_model_dir

        model_dir = resolve_model_dir(model)
        self.tokenizer = AutoTokenizer.from_pretrained(model_dir)
        decoder = load_hf(model_dir)
        family = decoder.cfg.family
        self.tool_parser = tool_parser or ("glm4" if family == "glm4" else "hermes")
        config = engine_config or default_engine_config(
            max_context or decoder.cfg.max_position_embeddings, max_batch)
        self.max_context = config.max_context
        stop = [self.tokenizer.eos_token_id]
        if family == "glm4":
            vocab = self.tokenizer.get_vocab()
            stop += [vocab[t] for t in _GLM4_TURN_ENDS if t in vocab]
        self._stop = tuple(dict.fromkeys(int(i) for i in stop))
        self.params = SamplingParams(temperature=temperature, max_new_tokens=max_new_tokens,
                                     stop_token_ids=self._stop, seed=0)
        self.engine = AsyncSamplingEngine(SamplingEngine(decoder, config))

    def prompt_tokens(self, messages: Sequence[Message], tools: Sequence[dict[str, Any]]) -> list:
        text = templates.render(self.tokenizer, messages, tools, add_generation_prompt=True)
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    async def respond(
        self, messages: Sequence[Message], tools: Sequence[dict[str, Any]], *, session_id: str
    ) -> str:
        prompt = self.prompt_tokens(messages, tools)
        if len(prompt) >= self.max_context:
            raise PromptTooLongError(
                f"{len(prompt)} prompt tokens; the context holds {self.max_context}")
        result = await self.engine.generate(
            GenerateRequest(prompt, self.params, session_id=session_id))
        tokens = result.tokens
        if tokens and tokens[-1] in self._stop:
            tokens = tokens[:-1]
        return str(self.tokenizer.decode(tokens, skip_special_tokens=False))

    async def end_session(self, session_id: str) -> None:
        await self.engine.end_session(session_id)

    def close(self) -> None:
        self.engine.close()

    def __enter__(self) -> EnginePolicy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
