"""The trainer driver's pieces one process can check: the layer-by-layer gather to host memory
and device to device onto another mesh. (Several processes: tests/launch/test_tpu_pod.)"""

import jax
import numpy as np
import pytest
from flax import nnx
from jax.sharding import NamedSharding, PartitionSpec

from agentrl_jax.experiment import rl_stage
from agentrl_jax.models.config import ModelConfig
from agentrl_jax.models.decoder import Decoder
from agentrl_jax.models.logprobs import token_logprobs
from agentrl_jax.parallel.mesh import make_mesh
from agentrl_jax.pipeline import trainer_driver, weight_sync
from agentrl_jax.rl import batch as batch_lib


def sharded_tree(mesh):
    rng = np.random.default_rng(0)
    tree = {"stacked": rng.normal(size=(3, 4, 6)).astype(np.float32),
            "embed": rng.normal(size=(8, 4)).astype(np.float32)}
    specs = {"stacked": PartitionSpec(None, "fsdp", "tensor"),
             "embed": PartitionSpec("tensor", "fsdp")}
    placed = {k: jax.device_put(v, NamedSharding(mesh, specs[k])) for k, v in tree.items()}
    return tree, placed


def test_gather_brings_sharded_parameters_to_the_host():
    mesh = make_mesh(fsdp=2, tensor=2, devices=jax.devices()[:4])
    tree, placed = sharded_tree(mesh)
    gather = trainer_driver.ParamGather()
    gathered = gather(placed)
    assert isinstance(gathered["stacked"], list) and len(gathered["stacked"]) == 3
    host = weight_sync.stacked(gathered)
    for k in tree:
        assert isinstance(host[k], np.ndarray)
        np.testing.assert_array_equal(host[k], tree[k])
    assert gather(placed, None) == {"stacked": None, "embed": None}


def test_gather_for_a_bf16_sampler_casts_before_gathering():
    """`ParamGather(dtype)` moves floating arrays in the samplers' dtype (half the bytes for
    bf16), rounded once; integer arrays keep theirs."""
    import ml_dtypes

    mesh = make_mesh(fsdp=2, tensor=2, devices=jax.devices()[:4])
    tree, placed = sharded_tree(mesh)
    placed["steps"] = jax.device_put(np.arange(4, dtype=np.int32),
                                     NamedSharding(mesh, PartitionSpec("fsdp")))
    host = weight_sync.stacked(trainer_driver.ParamGather("bfloat16")(placed))
    for k in tree:
        assert host[k].dtype == ml_dtypes.bfloat16
        np.testing.assert_array_equal(host[k], tree[k].astype(ml_dtypes.bfloat16))
    assert host["steps"].dtype == np.int32
    np.testing.assert_array_equal(host["steps"], np.arange(4))


def test_gather_places_layers_device_to_device_on_another_mesh():
    """The trainer's gathered layers go straight onto a sampler mesh of other devices, each
    layer on the sampler's own sharding, with no host copy on the way."""
    trainer_mesh = make_mesh(fsdp=2, tensor=2, devices=jax.devices()[:4])
    sampler_mesh = make_mesh(fsdp=1, tensor=2, devices=jax.devices()[4:6])
    tree, placed = sharded_tree(trainer_mesh)
    targets = {"stacked": NamedSharding(sampler_mesh, PartitionSpec(None, None, "tensor")),
               "embed": NamedSharding(sampler_mesh, PartitionSpec("tensor"))}
    onto = trainer_driver.onto(targets)
    seen = []

    def place(piece: jax.Array, path, layer):
        assert isinstance(piece, jax.Array) and len(piece.devices()) == 1
        seen.append((path[0].key, layer, piece.shape))
        return onto(piece, path, layer)

    out = trainer_driver.ParamGather()(placed, place)
    assert seen == [("embed", None, (8, 4))] + [("stacked", i, (4, 6)) for i in range(3)]
    for i, layer in enumerate(out["stacked"]):
        assert layer.sharding.spec == PartitionSpec(None, "tensor")
        assert set(layer.devices()) == set(jax.devices()[4:6])
        np.testing.assert_array_equal(np.asarray(layer), tree["stacked"][i])
    assert out["embed"].sharding == targets["embed"]
    np.testing.assert_array_equal(np.asarray(out["embed"]), tree["embed"])


def test_sampler_layout_splits_gathered_layers():
    gathered = {"embed": 1, "final_norm": 2, "layers": {"q": ["q0", "q1"], "k": ["k0", "k1"]}}
    assert weight_sync.sampler_layout(gathered) == {
        "embed": 1, "final_norm": 2, "layers": ({"q": "q0", "k": "k0"}, {"q": "q1", "k": "k1"})}


def test_one_gather_places_a_copy_on_each_replica():
    """Two sampler replicas on one process (devices 4-5 and 6-7): `onto_each` puts every
    gathered layer on both, and `replica_of` takes each one's tree back out."""
    trainer_mesh = make_mesh(fsdp=2, tensor=2, devices=jax.devices()[:4])
    tree, placed = sharded_tree(trainer_mesh)
    replicas = [make_mesh(fsdp=1, tensor=2, devices=jax.devices()[i:i + 2]) for i in (4, 6)]
    targets = [{"stacked": NamedSharding(m, PartitionSpec(None, None, "tensor")),
                "embed": NamedSharding(m, PartitionSpec("tensor"))} for m in replicas]
    out = trainer_driver.ParamGather()(placed, trainer_driver.onto_each(targets))
    for index, mesh in enumerate(replicas):
        mine = weight_sync.replica_of(out, index)
        assert isinstance(mine["stacked"], list) and len(mine["stacked"]) == 3
        for i, layer in enumerate(mine["stacked"]):
            assert set(layer.devices()) == set(mesh.devices.flat)
            np.testing.assert_array_equal(np.asarray(layer), tree["stacked"][i])
        assert mine["embed"].sharding == targets[index]["embed"]
        np.testing.assert_array_equal(np.asarray(mine["embed"]), tree["embed"])


def rl_config(sampling_temperature: float, trainer_temperature: float | None = None):
    c = rl_stage.default_config()
    c.sampling.temperature = sampling_temperature
    c.trainer.temperature = trainer_temperature
    c.trainer.seq_buckets = (16,)
    c.trainer.tokens_per_micro = 32
    return c


def test_the_rl_trainer_scores_tokens_at_the_sampling_temperature(tmp_path):
    """The RL set-up builds a trainer whose log-probs are those of the distribution the sampler
    drew from (softmax(logits / 0.8) here), so ratios to the behaviour log-probs start at 1."""
    model = Decoder(ModelConfig.tiny(), rngs=nnx.Rngs(0))
    c = rl_config(0.8)
    rng = np.random.default_rng(0)
    tokens = rng.integers(0, model.cfg.vocab_size, 12)
    traj = batch_lib.Trajectory(tokens=tokens, loss_mask=np.ones(12), advantage=1.0,
                                behaviour_logprobs=np.zeros(12))
    (micro,), _ = batch_lib.pack([traj], c.trainer.seq_buckets, c.trainer.tokens_per_micro, 1)
    mesh = make_mesh(devices=jax.devices()[:1])
    with trainer_driver.open_training(c, model=model, trainer_mesh=mesh,
                                      checkpoint_dir=tmp_path) as training:
        logp, _ = training.trainer.logprobs(training.state.params, micro)
    expected, _ = token_logprobs(model, micro.tokens, micro.positions, micro.segment_ids,
                                 micro.targets, temperature=0.8)
    at_one, _ = token_logprobs(model, micro.tokens, micro.positions, micro.segment_ids,
                               micro.targets, temperature=1.0)
    real = np.asarray(micro.segment_ids) > 0
    np.testing.assert_allclose(np.asarray(logp)[real], np.asarray(expected)[real], atol=1e-5)
    assert np.abs(np.asarray(at_one)[real] - np.asarray(expected)[real]).max() > 1e-3
    assert c.trainer.temperature is None   # the caller's config is left as it was


def test_trainer_temperature_follows_the_sampler_or_is_refused():
    assert trainer_driver.trainer_config(rl_config(0.8)).temperature == 0.8
    assert trainer_driver.trainer_config(rl_config(0.0)).temperature == 1.0   # greedy: T = 1
    assert trainer_driver.trainer_config(rl_config(0.8, 0.8)).temperature == 0.8
    with pytest.raises(ValueError, match="differs from the sampler's"):
        trainer_driver.trainer_config(rl_config(0.8, 1.0))
