"""The main job on a TPU pod (or any multi-host JAX cluster): RL against an environment fleet.

    python -m launch.tpu_pod --config=configs/agentbench_fc/qwen25_7b.py \\
        --config.model.path=/models/Qwen2.5-7B-Instruct \\
        --config.env.controller_url=http://10.0.0.2:5020/api \\
        --config.run_dir=gs://my-bucket/agentrl/qwen25_7b \\
        [--config.rl.trainer.optimizer.learning_rate=2e-6 ...]

Run the same command on every host of the slice (e.g. `gcloud compute tpus tpu-vm ssh NAME
--worker=all --command=...`). On a Cloud TPU VM the processes find each other by themselves;
elsewhere pass `--coordinator_address=HOST:PORT --num_processes=N --process_id=I` (process 0's
host and any free port). On one machine, without these flags, the run is one process.

Before renting the slice, check that the run fits it (on any machine, without the weights):

    python -m launch.tpu_pod --config=configs/agentbench_fc/qwen25_7b.py \\
        --compile_only --topology=v5p:4x4x4

compiles every program the run executes (train step, sampler buckets, weight gather) with
libtpu's compiler for that topology and prints each one's HBM per chip, FLOPs and roofline
(`agentrl_jax.aot`, docs/tpu_pod.md); it exits 1 naming any program that does not fit.

The job's stages are `agentrl_jax/experiment/job.py`'s, the same as on one machine; how the
processes divide the work: `agentrl_jax/experiment/pod_job.py`.
"""

from __future__ import annotations

import json
import pathlib

import jax
import ml_collections
from absl import app, flags
from ml_collections import config_flags

from agentrl_jax import compile_cache
from agentrl_jax.experiment import job, pod_job, run_config
from agentrl_jax.experiment.deployment import REMOTE
from agentrl_jax.experiment.run_dir import local_dir
from agentrl_jax.pipeline import multihost
from launch import process

FLAGS = flags.FLAGS

def define_flags() -> None:
    """The launcher's flags (defined on demand, so importing this module defines none)."""
    config_flags.DEFINE_config_file("config", None, "run configuration (a configs/ file)",
                                    lock_config=True)
    flags.mark_flag_as_required("config")
    flags.DEFINE_string("coordinator_address", None,
                        "multi-host: process 0's HOST:PORT (auto-detected on Cloud TPU)")
    flags.DEFINE_integer("num_processes", None, "multi-host: how many processes")
    flags.DEFINE_integer("process_id", None, "multi-host: this process's index")
    flags.DEFINE_integer("heartbeat_timeout_s", multihost.HEARTBEAT_TIMEOUT_S,
                         "multi-host: seconds after which a silent process counts as dead and "
                         "the others end")
    flags.DEFINE_bool("compile_only", False,
                      "compile every program of the run for --topology with libtpu's compiler "
                      "(no TPU, no weights, no fleet needed), print each one's memory and "
                      "roofline per chip, write --compile_report, exit 1 if one does not fit")
    flags.DEFINE_string("topology", "v5p:2x2x2", "--compile_only: the slice, CHIP:SHAPE")
    flags.DEFINE_bool("every_bucket", True,
                      "--compile_only: every bucket of every program (else each one's largest "
                      "shape, which bounds its memory)")
    flags.DEFINE_string("compile_report", "",
                        "--compile_only: where the JSON goes (default LOG_DIR/compile_report.json)")


def start(argv: list[str]) -> ml_collections.ConfigDict:
    """Flags → the checked config, with the processes joined (what `main` runs before `run`)."""
    process.begin(argv)
    config = run_config.resolve(FLAGS.config)
    pod_job.check_config(config)  # before joining the others: a bad config fails fast everywhere
    multihost.initialize(FLAGS.coordinator_address, FLAGS.num_processes, FLAGS.process_id,
                         heartbeat_timeout_s=FLAGS.heartbeat_timeout_s)
    return config


def compile_only(config: ml_collections.ConfigDict) -> None:
    """`--compile_only`: the run's programs compiled for `--topology`; exits 1 naming each
    program that does not fit its chip's HBM, and by how much."""
    from agentrl_jax.aot.compile_check import compile_check

    result = compile_check(config, FLAGS.topology, every_bucket=FLAGS.every_bucket)
    path = pathlib.Path(FLAGS.compile_report or local_dir(config) / "compile_report.json")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=1) + "\n")
    print(f"report: {path}", flush=True)
    if result["not_fitting"]:
        raise SystemExit("does not fit " + FLAGS.topology + ":\n  "
                         + "\n  ".join(result["not_fitting"]))


def main(argv: list[str]) -> None:
    if FLAGS.compile_only:
        process.begin(argv)
        # Nothing runs: the local backend is only the host's, never a TPU another job may hold.
        jax.config.update("jax_platforms", "cpu")
        compile_only(FLAGS.config)
        return
    compile_cache.enable()
    config = start(argv)
    job.run_job(config, REMOTE, pod_job.PodDeployment(config))


if __name__ == "__main__":
    define_flags()
    app.run(main)
