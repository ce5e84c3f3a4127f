"""End to end: sample, score, GRPO + task normalisation, PPO step; the reward must rise.

Task: the prompt is [BOS, d] for a digit d; the policy samples one token; reward 1 if it is
(d + 1) mod 10, else 0. A random tiny model starts near 1/16.
"""

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from agentrl_jax.models.config import ModelConfig
from agentrl_jax.models.decoder import Decoder
from agentrl_jax.parallel.mesh import make_mesh
from agentrl_jax.rl import advantages as adv_lib
from agentrl_jax.rl import batch as batch_lib
from agentrl_jax.rl import train_step as ts

VOCAB, BOS = 16, 10
PROMPTS, GROUP, STEPS = 16, 8, 40


def test_grpo_ppo_learns_successor_digit():
    cfg = ModelConfig.tiny(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_layers=1,
                           num_heads=2, num_kv_heads=1)
    c = ts.default_config()
    c.seq_buckets = (4,)
    c.tokens_per_micro = 4 * PROMPTS * GROUP
    c.optimizer.learning_rate = 2e-2
    trainer = ts.Trainer(Decoder(cfg, rngs=nnx.Rngs(0)), c,
                         make_mesh(fsdp=2, devices=jax.devices()[:2]))
    state = trainer.init_state(seed=0)

    @jax.jit
    def sample(params, prompts, key):
        b = prompts.shape[0]
        logits = trainer.model(params)(
            prompts, jnp.tile(jnp.arange(2), (b, 1)), jnp.ones_like(prompts))[:, -1]
        actions = jax.random.categorical(key, logits)
        logp = jax.nn.log_softmax(logits)[jnp.arange(b), actions]
        return actions, logp

    rng = np.random.default_rng(0)
    key = jax.random.key(0)
    rewards_per_step = []
    for _ in range(STEPS):
        digits = np.repeat(rng.integers(0, 10, PROMPTS), GROUP)
        prompts = np.stack([np.full_like(digits, BOS), digits], 1).astype(np.int32)
        key, sub = jax.random.split(key)
        actions, logp = map(np.asarray, sample(state.params, prompts, sub))
        rewards = (actions == (digits + 1) % 10).astype(float)
        rewards_per_step.append(rewards.mean())
        adv, weights = adv_lib.compute_advantages(
            rewards, np.ones(len(rewards), bool), np.ones(len(rewards), bool),
            np.repeat(np.arange(PROMPTS), GROUP),
            np.zeros(len(rewards), int), np.ones(len(rewards)),
        )
        trajs = [
            batch_lib.Trajectory(tokens=[BOS, d, a], loss_mask=[0, 0, 1],
                                 behaviour_logprobs=[0, 0, lp], advantage=A, weight=w)
            for d, a, lp, A, w in zip(digits, actions, logp, adv, weights, strict=True)
        ]
        state, metrics = trainer.step(state, *batch_lib.pack(trajs, c.seq_buckets,
                                                             c.tokens_per_micro, 2))
        assert np.isfinite(metrics["loss"])

    first, last = np.mean(rewards_per_step[:5]), np.mean(rewards_per_step[-5:])
    assert first < 0.25, str(np.round(rewards_per_step, 2).tolist())
    assert last > 0.6, str(np.round(rewards_per_step, 2).tolist())
    assert trainer.num_traces == 1
