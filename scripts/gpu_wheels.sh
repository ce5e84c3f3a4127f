#!/usr/bin/env bash
# Downloads into .whl/ (git-ignored) exactly the wheels the GPU machine lacks, for CPython 3.12 on
# x86-64 Linux, then checks that they close over their requirements and fit a device call.
# The names are benchmarks/gpu_packages.py's SHIPPED, at the versions this repository's .venv
# installed from setup.py's pins. Starts from an empty .whl/, so nothing else travels.
#
#     bash scripts/gpu_wheels.sh        # then: run(..., carry=[".whl"]) with scripts/gpu_run.sh
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
mkdir -p .whl
rm -f .whl/*.whl
mapfile -t pins < <(PYTHONPATH=$PWD "$PY" -m benchmarks.gpu_packages pins)
platforms=()
for n in 17 24 27 28 31 34 35 39; do platforms+=(--platform "manylinux_2_${n}_x86_64"); done
platforms+=(--platform manylinux2014_x86_64 --platform manylinux1_x86_64)
"$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
  --implementation cp "${platforms[@]}" -d .whl "${pins[@]}"
PYTHONPATH=$PWD "$PY" -m benchmarks.gpu_packages check .whl
du -sh .whl
