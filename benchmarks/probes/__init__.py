"""Probes: one-off investigations whose conclusion is recorded in the docs, kept runnable.

Each answered one question (does a copy prior help, is a decode plan worth its calls, what a
sandbox bound costs, ...); the answer and its figures are in docs/ (benchmarks/README.md says
which page). They are not standing measurements of the framework's speed: those are the
headline benchmarks one level up. A probe still runs as `python -m benchmarks.probes.NAME`
and writes benchmarks/results/NAME.json, as a headline benchmark does (`benchmarks/__init__.py`
pins the CPU backend first where no accelerator is present)."""
