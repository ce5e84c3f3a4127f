"""Benchmarks: each `python -m benchmarks.NAME` (a headline benchmark) or
`python -m benchmarks.probes.NAME` (a probe: a one-off investigation whose finding is in the
docs) prints a summary and writes benchmarks/results/NAME.json; benchmarks/README.md lists
them. Without an accelerator they run on the CPU backend (`agentrl_jax.backend_choice`),
pinned here, before any benchmark or probe picks one."""

from agentrl_jax.backend_choice import pin_cpu_without_accelerator

pin_cpu_without_accelerator()
