"""How a pod's devices divide between sampler replicas and the trainer (8 CPU devices, one
process here; the per-process counts are checked through `sampler_count` for many)."""

import jax
import ml_collections
import pytest

from agentrl_jax.pipeline import pod_layout


def mesh_config(**overrides) -> ml_collections.ConfigDict:
    config = ml_collections.ConfigDict(dict(
        sampler_devices=1, sampler_devices_per_host=0, sampler_devices_by_process=(),
        sampler_tensor_parallel=0, trainer=dict(data=1, fsdp=-1, tensor=1)))
    config.update(overrides)
    return config


def test_one_replica_over_the_leaders_sampler_devices_by_default():
    layout = pod_layout.build_layout(mesh_config(sampler_devices=2))
    (sampler,) = layout.samplers
    assert list(sampler.devices.flat) == jax.devices()[:2]
    assert sampler.shape["tensor"] == 2
    assert list(layout.trainer.devices.flat) == jax.devices()[2:]
    assert layout.replicas_by_process == (1,)
    assert not layout.needs_hub and not layout.followers_sample


def test_tensor_parallel_replicas_split_a_hosts_sampler_devices():
    layout = pod_layout.build_layout(mesh_config(sampler_devices=6, sampler_tensor_parallel=2))
    assert [list(m.devices.flat) for m in layout.samplers] == [
        jax.devices()[0:2], jax.devices()[2:4], jax.devices()[4:6]]
    assert all(m.shape["tensor"] == 2 for m in layout.samplers)
    assert list(layout.trainer.devices.flat) == jax.devices()[6:]
    assert layout.replicas_by_process == (3,)
    assert layout.needs_hub and not layout.followers_sample  # the leader's own further two


def test_counts_per_process_replace_the_uniform_ones():
    config = mesh_config(sampler_devices=2, sampler_devices_per_host=1)
    assert [pod_layout.sampler_count(config, p, 3) for p in range(3)] == [2, 1, 1]
    config.sampler_devices_by_process = (1, 0, 4)
    assert [pod_layout.sampler_count(config, p, 3) for p in range(3)] == [1, 0, 4]
    with pytest.raises(ValueError, match="names 3 processes; the run has 2"):
        pod_layout.sampler_count(config, 0, 2)
    layout = pod_layout.build_layout(mesh_config(sampler_devices_by_process=(3,)))
    assert layout.samplers[0].size == 3 and layout.trainer.size == 5


@pytest.mark.parametrize("overrides, message", [
    (dict(sampler_devices=8), "must keep at least one for the trainer"),
    (dict(sampler_devices_by_process=(0,)), "process 0 needs at least one"),
    (dict(sampler_devices=3, sampler_tensor_parallel=2), "do not divide into replicas"),
])
def test_layouts_that_cannot_run_say_what_to_change(overrides, message):
    with pytest.raises(ValueError, match=message):
        pod_layout.build_layout(mesh_config(**overrides))
