#!/usr/bin/env bash
# Rehearses the two GPU-machine calls on this CPU machine: a Python 3.12 environment holding only
# packages the GPU machine has (benchmarks/gpu_packages.py), a copy of the tree per call with
# exactly what that call carries (docs/gpu_suite.md), and scripts/gpu_run.sh on --tiny shapes.
# It needs a package registry here, once, for that environment; the GPU machine needs none.
#
#     bash scripts/gpu_wheels.sh && bash scripts/gpu_carry.sh && bash scripts/gpu_dryrun.sh
set -euo pipefail
cd "$(dirname "$0")/.."
DRY=${DRY:-/tmp/agentrl_gpu_dryrun}
PY312=${PY312:-python3.12}
env=$DRY/env
if [[ ! -x $env/bin/python ]]; then
  "$PY312" -m venv "$env"
  mapfile -t wanted < <(PYTHONPATH=$PWD .venv/bin/python -m benchmarks.gpu_packages device)
  "$env/bin/pip" install -q "${wanted[@]}"
  # what pip pulled in besides, which the GPU machine does not have
  mapfile -t extra < <(PYTHONPATH=$PWD "$env/bin/python" -m benchmarks.gpu_packages extra)
  ((${#extra[@]})) && "$env/bin/pip" uninstall -q -y "${extra[@]}"
fi
# A fresh machine: nothing staged or installed, no model cache.
rm -rf /tmp/agentrl_stage /tmp/agentrl_site /tmp/agentrl_runs "$DRY/cache" "$DRY/shared"
export AGENTRL_JAX_CACHE=$DRY/cache XLA_FLAGS=
call_tree() {   # call_tree DIR CARRIED...: the tracked tree plus the carried paths
  local dir=$1; shift
  rm -rf "$dir" && mkdir -p "$dir"
  git ls-files -z | xargs -0 cp --parents -t "$dir"
  for path in "$@"; do cp -r --parents "$path" "$dir"; done
}
call_tree "$DRY/call1" .gpu/smollm2.gguf.part0
(cd "$DRY/call1" && PY=$env/bin/python bash scripts/gpu_run.sh --stage)
call_tree "$DRY/call2" .whl .gpu/smollm2.gguf.part1 .gpu/SHA256SUMS .gpu/bubblewrap.deb \
  .gpu/agentbench
(cd "$DRY/call2" && PY=$env/bin/python bash scripts/gpu_run.sh "$DRY/out" --tiny "$@")
echo "rehearsal output: $DRY/out"
