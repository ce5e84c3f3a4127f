"""AgentBench-FC configs for `launch.tpu_pod`: one file per model, the paper's ablations."""
