"""The persistent compilation cache: a process's compile-bound start, cold against warm.

What a run of the main job compiles before it does useful work, measured on its sampler: the
default's engine config (`configs/local_default.py`) on the default's scratch model, over
prompts that reach every prefill, context and batch bucket of the first turns.
The same child process runs twice over one empty cache folder (`agentrl_jax/compile_cache.py`):
the first compiles and writes, the second loads. Also a third child with the cache off, so the
writing's own cost shows. Writes benchmarks/results/compile_cache.json with each child's
seconds and `warm_vs_cold` (target ≤ 0.6 of the issue, for a whole run).

`--tests` times the test session the same way instead (the README's `pytest -q`, or the paths
given), off, then cold and warm over one empty cache folder, into `compile_cache_tests.json`:
the issue asks that the suite be no slower with the cache than without and faster the second
time. Three passes of the whole suite take about an hour on a 2-core CPU.

    python -m benchmarks.compile_cache
    python -m benchmarks.compile_cache --tests               # the whole default suite
    python -m benchmarks.compile_cache --tests tests/sampling
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time

from benchmarks.machine_info import write_result

_CHILD = r"""
import json, time
started = time.perf_counter()
from agentrl_jax import compile_cache
compile_cache.enable()
import jax, jax.numpy as jnp, numpy as np
from flax import nnx
from configs.local_default import get_config
from agentrl_jax.dataclass_config import dataclass_from
from agentrl_jax.models.config import ModelConfig
from agentrl_jax.models.decoder import Decoder
from agentrl_jax.sampling import EngineConfig, GenerateRequest, SamplingEngine, SamplingParams
config = get_config()
model = Decoder(ModelConfig(vocab_size=config.model.vocab_size, dtype=jnp.float32,
                            **config.model.scratch.to_dict()), rngs=nnx.Rngs(0))
imported = time.perf_counter()
engine = SamplingEngine(model, dataclass_from(config.rl.engine, EngineConfig))
rng = np.random.default_rng(0)
# prompts across the prefill buckets, up to 16 at once: the shapes the first turns reach
lengths = [100, 400, 1500, 700, 120, 300, 2000, 90, 450, 60, 800, 1300, 200, 150, 1000, 50]
requests = [GenerateRequest(prompt=rng.integers(10, 4000, n).tolist(),
                            params=SamplingParams(max_new_tokens=24, temperature=0.8, seed=i))
            for i, n in enumerate(lengths)]
engine.generate(requests)
sampled = time.perf_counter()
print(json.dumps({"import_s": imported - started, "sampler_s": sampled - imported,
                  "total_s": time.perf_counter() - started}))
"""


_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _env(cache: str) -> dict[str, str]:
    """This environment with the compilation cache at `cache` ("0": off), nothing inherited."""
    env = {**os.environ, "AGENTRL_JAX_COMPILE_CACHE": cache}
    env.pop("JAX_COMPILATION_CACHE_DIR", None)
    return env


def _child(cache: str) -> dict[str, float]:
    out = subprocess.run([sys.executable, "-c", _CHILD], env=_env(cache), check=True, text=True,
                         capture_output=True, cwd=_REPO).stdout
    return json.loads(out.strip().splitlines()[-1])


def outcome_counts(summary: str) -> dict[str, int]:
    """pytest's last line ("3 failed, 1100 passed, 4 skipped in 846.80s") as counts."""
    return {word: int(number) for number, word in re.findall(r"(\d+) (\w+)", summary)
            if word in ("passed", "failed", "skipped", "errors", "error")}


def _test_session(cache: str, paths: list[str]) -> dict[str, float | int]:
    """Seconds of one `pytest -q` over `paths` with the cache at `cache`, and its outcome."""
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *paths],
                          env=_env(cache), text=True, capture_output=True, cwd=_REPO)
    seconds = time.perf_counter() - started
    lines = done.stdout.strip().splitlines()
    print(f"  cache {'off' if cache == '0' else cache}: {seconds:.0f} s, "
          f"{lines[-1] if lines else done.returncode}", flush=True)
    return {"s": seconds, **outcome_counts(lines[-1] if lines else "")}


def tests_main(paths: list[str]) -> None:
    """Times the test session off, cold and warm; writes compile_cache_tests.json."""
    print(f"pytest -q {' '.join(paths) or '(the whole default suite)'}:", flush=True)
    runs = {"off": _test_session("0", paths)}
    with tempfile.TemporaryDirectory(prefix="compile-cache-tests-") as folder:
        runs["cold"] = _test_session(folder, paths)
        runs["warm"] = _test_session(folder, paths)
        entries = sum(len(files) for _, _, files in os.walk(folder))
    figures: dict[str, object] = {"paths": " ".join(paths) or "(default suite)",
                                  "cache_files": entries}
    for name, run in runs.items():
        figures.update({f"{name}_{key}": round(value, 1) if key == "s" else value
                        for key, value in run.items()})
    figures["cold_vs_off"] = round(runs["cold"]["s"] / runs["off"]["s"], 3)
    figures["warm_vs_cold"] = round(runs["warm"]["s"] / runs["cold"]["s"], 3)
    figures["warm_vs_off"] = round(runs["warm"]["s"] / runs["off"]["s"], 3)
    print(f"cold / off = {figures['cold_vs_off']}, warm / cold = {figures['warm_vs_cold']}, "
          f"warm / off = {figures['warm_vs_off']}")
    write_result("compile_cache_tests", figures)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tests", nargs="*", metavar="PATH",
                        help="time the test session (on PATHs, or the whole default suite)")
    args = parser.parse_args()
    if args.tests is not None:
        tests_main(args.tests)
        return
    with tempfile.TemporaryDirectory(prefix="compile-cache-bench-") as folder:
        off = _child("0")
        cold = _child(folder)
        warm = _child(folder)
        entries = sum(len(files) for _, _, files in os.walk(folder))
    figures = {
        "off_sampler_s": round(off["sampler_s"], 2), "cold_sampler_s": round(cold["sampler_s"], 2),
        "warm_sampler_s": round(warm["sampler_s"], 2),
        "off_total_s": round(off["total_s"], 2), "cold_total_s": round(cold["total_s"], 2),
        "warm_total_s": round(warm["total_s"], 2),
        "warm_vs_cold": round(warm["total_s"] / cold["total_s"], 3),
        "cold_vs_off": round(cold["total_s"] / off["total_s"], 3),
        "cache_files": entries,
    }
    print("the main job's sampler start (default engine config, scratch model):")
    for name in ("off", "cold", "warm"):
        print(f"  cache {name:>4}: {figures[f'{name}_total_s']:6.1f} s "
              f"(sampler {figures[f'{name}_sampler_s']:.1f} s)")
    print(f"warm / cold = {figures['warm_vs_cold']}, cold / off = {figures['cold_vs_off']}")
    write_result("compile_cache", figures)


if __name__ == "__main__":
    main()
