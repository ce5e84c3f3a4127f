"""A sampling engine small enough for a tiny model, the greedy request the weight-sync tests
send through it (what an engine serves is read off four deterministic tokens), and a trained
state to sync."""

import numpy as np

from agentrl_jax.rl import batch as batch_lib
from agentrl_jax.sampling import EngineConfig, SamplingParams

ENGINE = EngineConfig(max_batch=2, page_size=4, num_pages=32, max_context=32,
                      prefill_buckets=(8,), context_buckets=(16,), batch_buckets=(1,),
                      steps_per_sync=2)
GREEDY = SamplingParams(temperature=0.0, max_new_tokens=4)
PROMPT = [3, 14, 15, 92, 65]


def trained_state(trainer, steps: int = 2):
    """`trainer`'s state after `steps` steps on four random 12-token trajectories (seed 0),
    so that its weights differ from the initial ones."""
    rng = np.random.default_rng(0)
    trajs = [batch_lib.Trajectory(tokens=rng.integers(0, 128, 12), loss_mask=np.ones(12),
                                  behaviour_logprobs=np.full(12, -4.0), advantage=1.0)
             for _ in range(4)]
    micro, n = batch_lib.pack(trajs, (16,), 64, 2)
    state = trainer.init_state()
    for _ in range(steps):
        state, _ = trainer.step(state, micro, n)
    return state
