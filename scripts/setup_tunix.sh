#!/usr/bin/env bash
# Tunix's own environment, .venv-tunix, for benchmarks/sampler.py's side-by-side (issue #30).
# Separate from .venv: Tunix pins safetensors<0.8, which the project's pins exclude. Same jax,
# jaxlib and flax as the project, so both samplers run on the same XLA. Idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ ! -x .venv-tunix/bin/python ]]; then
  python3 -m venv .venv-tunix
fi
stamp=.venv-tunix/.installed-$(sha256sum < benchmarks/tunix_requirements.txt | cut -c1-16)
if [[ ! -f $stamp ]]; then
  .venv-tunix/bin/pip install -q --upgrade pip
  .venv-tunix/bin/pip install -q -r benchmarks/tunix_requirements.txt
  touch "$stamp"
fi
.venv-tunix/bin/python -c "import tunix.generate.sampler" && echo "Tunix ready: .venv-tunix"
