"""The JAX generation engine: continuous batching, paged KV kept across turns, logprobs, weight
updates, a pool of named policies.

    engine = AsyncSamplingEngine(SamplingEngine(model, EngineConfig(...), mesh=sampler_mesh))
    result = await engine.generate(GenerateRequest(prompt_tokens, SamplingParams(...),
                                                   policy="current", session_id=episode_id))
    await engine.update_params(new_params, version)
"""

from agentrl_jax.sampling.async_engine import AsyncSamplingEngine
from agentrl_jax.sampling.engine import EngineConfig, SamplingEngine, prefill_window
from agentrl_jax.sampling.types import (
    FinishReason,
    GenerateRequest,
    GenerationResult,
    SamplingParams,
    TokenEvent,
)

__all__ = [
    "AsyncSamplingEngine",
    "EngineConfig",
    "FinishReason",
    "GenerateRequest",
    "GenerationResult",
    "SamplingEngine",
    "SamplingParams",
    "TokenEvent",
    "prefill_window",
]
