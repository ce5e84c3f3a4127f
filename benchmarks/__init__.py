"""Benchmarks: each `python -m benchmarks.NAME` prints a summary and writes
benchmarks/results/NAME.json. Without an accelerator they run on the CPU backend
(`agentrl_jax.backend_choice`), before any benchmark picks one."""

from agentrl_jax.backend_choice import pin_cpu_without_accelerator

pin_cpu_without_accelerator()
