"""A sampling engine small enough for a tiny model, and the greedy request the weight-sync
tests send through it: what an engine serves is then read off four deterministic tokens."""

from agentrl_jax.sampling import EngineConfig, SamplingParams

ENGINE = EngineConfig(max_batch=2, page_size=4, num_pages=32, max_context=32,
                      prefill_buckets=(8,), context_buckets=(16,), batch_buckets=(1,),
                      steps_per_sync=2)
GREEDY = SamplingParams(temperature=0.0, max_new_tokens=4)
PROMPT = [3, 14, 15, 92, 65]
