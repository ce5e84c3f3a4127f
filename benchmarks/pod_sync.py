"""Weight sync from trainer chips to sampler chips: host round trip vs device to device.

    python -m benchmarks.pod_sync

One process with 8 virtual CPU devices: a decoder's parameters sharded over a trainer mesh of 4
(fsdp), a sampler mesh of 2 others (tensor parallel). Both paths gather layer by layer with
`pipeline.trainer_driver.ParamGather`; then
  host    copies each gathered piece to host memory and places the whole on the sampler mesh
          with one `jax.device_put` (the fallback, what the leader did before #22);
  device  places each gathered piece straight onto the sampler's per-layer sharding
          (`jax.device_put` between this process's devices; no host copy).
Both end in the sampler layout (`sampling.weights.split_layers`); they are checked equal. On a
CPU every device is host memory, so the ratio says what the host copy costs here, not on a TPU;
the bytes through host memory per sync (the figure that scales with model size) are exact.
Writes benchmarks/results/pod_sync.json.
"""

from __future__ import annotations

import os

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")

import statistics  # noqa: E402
import time  # noqa: E402

import jax  # noqa: E402
import numpy as np  # noqa: E402
from flax import nnx  # noqa: E402

from agentrl_jax.models.config import ModelConfig  # noqa: E402
from agentrl_jax.models.decoder import Decoder  # noqa: E402
from agentrl_jax.parallel.mesh import make_mesh  # noqa: E402
from agentrl_jax.parallel.sharding import shard_model  # noqa: E402
from agentrl_jax.pipeline.trainer_driver import ParamGather, host, onto  # noqa: E402
from agentrl_jax.pipeline.weight_sync import sampler_layout, stacked  # noqa: E402
from agentrl_jax.sampling import weights as weights_lib  # noqa: E402
from benchmarks.machine_info import write_result  # noqa: E402

REPEATS = 5


def main() -> None:
    devices = jax.devices()
    trainer_mesh = make_mesh(fsdp=4, devices=devices[:4])
    sampler_mesh = make_mesh(data=1, fsdp=1, tensor=2, devices=devices[4:6])
    cfg = ModelConfig.tiny("llama", vocab_size=16384, hidden_size=512, intermediate_size=1536,
                           num_layers=8, num_heads=8, num_kv_heads=4, head_dim=64)
    model = shard_model(Decoder(cfg, rngs=nnx.Rngs(0)), trainer_mesh)
    trained = weights_lib.weights_of(model)
    num_layers = cfg.num_layers
    stacked_shardings = weights_lib.weight_shardings(model, sampler_mesh)
    nbytes = sum(x.nbytes for x in jax.tree.leaves(trained))
    gather = ParamGather()

    def host_path():
        on_host = stacked(gather(trained, host))
        placed = jax.device_put(on_host, stacked_shardings)
        return weights_lib.split_layers(placed)

    def device_path():
        return sampler_layout(gather(trained, onto(stacked_shardings)))

    def timed(fn):
        result = jax.block_until_ready(fn())  # warm-up (compiles the gathers)
        seconds = []
        for _ in range(REPEATS):
            start = time.perf_counter()
            jax.block_until_ready(fn())
            seconds.append(time.perf_counter() - start)
        return result, statistics.median(seconds)

    host_result, host_s = timed(host_path)
    device_result, device_s = timed(device_path)
    for a, b in zip(jax.tree.leaves(host_result), jax.tree.leaves(device_result), strict=True):
        assert a.sharding.is_equivalent_to(b.sharding, a.ndim), (a.sharding, b.sharding)
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    figures = {
        "params": int(sum(x.size for x in jax.tree.leaves(trained))),
        "weights_bytes": int(nbytes),
        "trainer_devices": 4, "sampler_devices": 2, "layers": num_layers,
        "host_sync_s": host_s, "device_sync_s": device_s,
        "device_vs_host_speedup": host_s / device_s,
        "host_path_bytes_through_host_memory": int(2 * nbytes),  # device -> host -> device
        "device_path_bytes_through_host_memory": 0,
        "bytes_onto_sampler_devices_per_sync": int(nbytes),
        "repeats": REPEATS,
        "load_average_at_start": os.getloadavg()[0],
    }
    path = write_result("pod_sync", figures)
    print(f"{nbytes / 1e6:.1f} MB of weights, 4 trainer -> 2 sampler CPU devices: host round "
          f"trip {host_s * 1e3:.1f} ms, device to device {device_s * 1e3:.1f} ms "
          f"({host_s / device_s:.2f}x); host memory traffic {2 * nbytes / 1e6:.1f} MB vs 0 "
          f"-> {path}")


if __name__ == "__main__":
    main()
