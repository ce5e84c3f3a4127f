"""Checkpoints: k steps, stop, resume, m steps == k + m uninterrupted steps (bitwise on CPU)."""

import grain
import jax
import numpy as np
import pytest
from flax import nnx

from agentrl_jax.checkpoint import BaseMismatchError, CheckpointManager
from agentrl_jax.models.config import ModelConfig
from agentrl_jax.models.decoder import Decoder
from agentrl_jax.parallel.mesh import make_mesh
from agentrl_jax.rl import batch as batch_lib
from agentrl_jax.rl import train_step as ts

K, M = 2, 2


def data_iterator():
    """A shuffled grain pipeline of batch seeds: its position must survive the restart."""
    return iter(grain.MapDataset.range(100).shuffle(seed=7).to_iter_dataset())


def make_batch(seed):
    rng = np.random.default_rng(int(seed))
    trajs = [
        batch_lib.Trajectory(
            tokens=rng.integers(0, 128, n),
            loss_mask=(rng.random(n) < 0.7).astype(float),
            behaviour_logprobs=np.log(1 / 128) + 0.2 * rng.normal(size=n),
            advantage=float(rng.normal()),
        )
        for n in rng.integers(3, 16, 8)
    ]
    return batch_lib.pack(trajs, (16,), 32, 2)


def make_trainer():
    c = ts.default_config()
    c.optimizer.learning_rate = 1e-2
    c.optimizer.schedule = "cosine"
    c.optimizer.warmup_steps = 1
    c.optimizer.total_steps = K + M
    model = Decoder(ModelConfig.tiny(), rngs=nnx.Rngs(0))
    return ts.Trainer(model, c, make_mesh(fsdp=2, tensor=2, devices=jax.devices()[:4]))


def run(trainer, state, it, steps):
    for _ in range(steps):
        state, _ = trainer.step(state, *make_batch(next(it)))
    return state


def test_resume_is_bitwise_identical(tmp_path):
    trainer = make_trainer()
    it = data_iterator()
    full = run(trainer, trainer.init_state(seed=3), it, K + M)
    full = jax.device_get(full)

    # First run: K steps, checkpoint (asynchronously), then the "process" ends.
    it = data_iterator()
    state = run(trainer, trainer.init_state(seed=3), it, K)
    with CheckpointManager(tmp_path) as mgr:
        assert mgr.save(K, state, data_iterator=it, bookkeeping={"policy_version": K, "x": [1]})
        mgr.wait_until_finished()

    # Second run: a fresh trainer and iterator, restored, then M more steps.
    trainer2 = make_trainer()
    it2 = data_iterator()
    with CheckpointManager(tmp_path) as mgr:
        assert mgr.latest_step() == K
        state2, book = mgr.restore(trainer2.init_state(seed=99), data_iterator=it2)
    assert book == {"policy_version": K, "x": [1]}
    assert int(state2.step) == K
    assert state2.params["layers"]["q_proj"].sharding == state.params["layers"]["q_proj"].sharding
    resumed = jax.device_get(run(trainer2, state2, it2, M))
    jax.tree.map(np.testing.assert_array_equal, resumed, full)


def test_keep_n_and_restore_specific_step(tmp_path):
    tree = {"w": jax.numpy.arange(4.0), "step": jax.numpy.zeros((), jax.numpy.int32)}
    with CheckpointManager(tmp_path, max_to_keep=2) as mgr:
        for s in range(4):
            mgr.save(s, jax.tree.map(lambda x, s=s: x + s, tree))
        mgr.wait_until_finished()
        assert mgr.all_steps() == [2, 3]
        restored, book = mgr.restore(tree, step=2)
    assert book is None
    np.testing.assert_array_equal(restored["w"], np.arange(4.0) + 2)


def test_keep_period_keeps_its_multiples_beyond_the_latest_n(tmp_path):
    tree = {"w": jax.numpy.arange(4.0)}
    with CheckpointManager(tmp_path, max_to_keep=1, keep_period=3) as mgr:
        for s in range(1, 8):
            mgr.save(s, jax.tree.map(lambda x, s=s: x + s, tree))
        mgr.wait_until_finished()
        assert mgr.all_steps() == [3, 6, 7]
        restored, _ = mgr.restore(tree, step=3)
    np.testing.assert_array_equal(restored["w"], np.arange(4.0) + 3)


def make_lora_trainer(seed=0, base_dtype=None):
    c = ts.default_config()
    c.optimizer.learning_rate = 1e-2
    c.lora.update(enabled=True, rank=4, alpha=8.0, base_dtype=base_dtype)
    model = Decoder(ModelConfig.tiny(), rngs=nnx.Rngs(seed))
    return ts.Trainer(model, c, make_mesh(fsdp=2, tensor=2, devices=jax.devices()[:4]))


def test_lora_resume_is_bitwise_and_checks_the_base(tmp_path):
    trainer = make_lora_trainer()
    it = data_iterator()
    full = jax.device_get(run(trainer, trainer.init_state(seed=3), it, K + M))

    it = data_iterator()
    state = run(trainer, trainer.init_state(seed=3), it, K)
    with CheckpointManager(tmp_path, base_fingerprint=trainer.base_fingerprint) as mgr:
        mgr.save(K, state, data_iterator=it)
        mgr.wait_until_finished()
    # Only adapters and their optimizer state are in the checkpoint.
    names = set(jax.device_get(state.params)["layers"])
    assert names and all("_lora_" in n for n in names)

    trainer2 = make_lora_trainer()
    it2 = data_iterator()
    with CheckpointManager(tmp_path, base_fingerprint=trainer2.base_fingerprint) as mgr:
        assert mgr.saved_base_fingerprint() == trainer.base_fingerprint
        state2, _ = mgr.restore(trainer2.init_state(seed=99), data_iterator=it2)
    resumed = jax.device_get(run(trainer2, state2, it2, M))
    jax.tree.map(np.testing.assert_array_equal, resumed, full)

    # Another base (other weights, or the same in another dtype), or no fingerprint: refused.
    for other in (make_lora_trainer(seed=1), make_lora_trainer(base_dtype="bfloat16")):
        assert other.base_fingerprint != trainer.base_fingerprint
        with CheckpointManager(tmp_path, base_fingerprint=other.base_fingerprint) as mgr:
            with pytest.raises(BaseMismatchError, match="not this run's base"):
                mgr.restore(other.init_state())
    with CheckpointManager(tmp_path) as mgr:
        with pytest.raises(BaseMismatchError, match="holds LoRA adapters"):
            mgr.restore(trainer2.init_state())
