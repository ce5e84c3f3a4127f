"""One process of the two-process test: `launch.tpu_pod` with its own flags, then the shards of
the final parameters this process holds, written to `--shards_out` (an .npz)."""

from __future__ import annotations

import jax
import numpy as np
from absl import app, flags

from agentrl_jax.experiment import job, pod_job
from agentrl_jax.experiment.deployment import REMOTE
from launch import tpu_pod

flags.DEFINE_string("shards_out", None, "where to write this process's parameter shards")


def path_key(path) -> str:
    return ".".join(str(getattr(k, "key", getattr(k, "idx", k))) for k in path)


def main(argv: list[str]) -> None:
    config = tpu_pod.start(argv)
    deployment = pod_job.PodDeployment(config)
    job.run_job(config, REMOTE, deployment)
    state = deployment.state
    arrays = {}
    for path, leaf in jax.tree_util.tree_flatten_with_path(state.params)[0]:
        for k, shard in enumerate(leaf.addressable_shards):
            bounds = [(s.start or 0, dim if s.stop is None else s.stop)
                      for s, dim in zip(shard.index, leaf.shape, strict=True)]
            arrays[f"{path_key(path)}|{k}"] = np.asarray(shard.data)
            arrays[f"{path_key(path)}|{k}|bounds"] = np.asarray(bounds, np.int64).reshape(-1, 2)
    np.savez(flags.FLAGS.shards_out, **arrays)


if __name__ == "__main__":
    tpu_pod.define_flags()
    app.run(main)
