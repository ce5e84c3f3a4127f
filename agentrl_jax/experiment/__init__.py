"""The run: its stages as a library, which the launchers only configure and start.

  job.py               the main job as a graph of resumable stages, on one machine or a pod
  deployment.py        where the models live and who trains them (`config.deployment`)
  pod_job.py           the pod's deployment (several hosts, a remote environment fleet)
  export_stage.py      the trained policy as an HF directory (a bucket too)
  run_config.py        the run's config, resolved once and frozen
  run_dir.py           the run directory and its stage markers
  demonstrations.py    oracle demonstrations, played once and cached
  warm_start.py        the supervised warm start, cached by what decides it
  rl_stage.py          the RL stage: engine, trainer, pipeline, checkpoints, resume
  evaluation_stage.py  evaluation before and after RL, and the copy probe
  run_report.py        results.md and success.png (tables and plot in report.py)
  policy.py            a policy (model + tokenizer + parser), loaded or saved
  saved_policy.py      what `launch.eval` and `launch.serve` load: a directory, a zoo name, or a
                       run's RL checkpoint
  metrics.py           metrics.jsonl and TensorBoard
"""
