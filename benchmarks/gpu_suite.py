"""The accelerator suite: the figures that matter, measured on a GPU in one call (issue #23).

    python -m benchmarks.gpu_suite                 # all parts, 420 s budget; on the GPU machine
    python -m benchmarks.gpu_suite --tiny          # every part on tiny shapes (CPU, a few minutes)
    bash scripts/gpu_run.sh OUTDIR                 # on the GPU machine: wheels, model, then this

Each part runs in its own child process, so that a part that raises, runs out of memory or hangs
loses only its own figures, and every part starts with the accelerator's memory to itself. A
part runs only if its estimate fits into what is left of the budget (`--budget_s`); otherwise
the JSON says why it was skipped. It is killed when the budget runs out.

  peaks    the ceilings, measured in this run: HBM bandwidth from a large device copy (bytes read
           plus written), and a large bf16 matmul's FLOP/s
  sampler  bf16 decode tokens/s at batch 64 and 256 after 512-token prompts, SmolLM2-135M and a
           random-init model of Qwen2.5-1.5B's shape; the HBM fraction is the step's bytes
           (benchmarks/sampler_gpu.py) over its time over the copy peak
  train    train-step tokens/s, bf16 compute with fp32 master weights (and AdamW state), and the
           model FLOP utilisation against the matmul peak (FLOPs: benchmarks/train_step.py)
  learn    the SmolLM2 main job on a short budget (configs/local_smollm2.py:gpu): warm start, RL,
           evaluation before and after; success and stage times
  extras   the prefix-cache (#18) and LoRA (#19) benchmarks, through their modules' `suite_figures`
           function when it exists (skipped with the reason otherwise)

The JSON (`benchmarks/results/gpu_suite.json`) is flat: every figure's key is always present,
null when its part did not run; `skipped_PART` / `error_PART` say why, `part_seconds_PART` how
long each took, and the machine and versions are added.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import json
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from typing import Any

REPO_ROOT = pathlib.Path(__file__).resolve().parent.parent
RESULTS = REPO_ROOT / "benchmarks" / "results" / "gpu_suite.json"
TINY_RESULTS = REPO_ROOT / "runs" / "gpu_suite_tiny.json"
DEFAULT_BUDGET_S = 420.0
KILL_GRACE_S = 20.0   # a part past the budget gets this long to write what it has
REFERENCE_POINTS = ("H200 here (KINDS.md, 2026-11): ~4.3 TB/s device-to-device copy, "
                    "~790 TFLOP/s 8192^3 bf16 matmul on random data")

MODELS = ("smollm2_135m", "qwen25_1_5b")
BATCHES = (64, 256)
LEARN_STAGES = ("demos", "warm_start", "eval_before", "rl", "eval_after")
HOOK = "suite_figures"   # `suite_figures(tiny: bool) -> dict[str, float]` in an extras module
EXTRAS = {   # name: (module, the keys its issue names)
    "prefix": ("benchmarks.sampler", ("prefix_reuse_vs_none", "prefill_tokens_saved_frac")),
    "lora": ("benchmarks.lora", ("lora_vs_full_step", "lora_peak_rss_mb", "full_peak_rss_mb",
                                 "lora_sync_bytes", "full_sync_bytes", "lora_decode_vs_base")),
}


@dataclasses.dataclass(frozen=True)
class Options:
    """What every part is called with (it crosses into the child process as JSON)."""

    tiny: bool = False
    deadline: float = 0.0   # time.time() by which the part must have returned
    work_dir: str = str(REPO_ROOT / "runs" / "gpu_suite")
    learn_flags: tuple[str, ...] = ()   # extra launch.local flags, e.g. --config.env.sandbox=False


@dataclasses.dataclass(frozen=True)
class Part:
    """A part of the suite: `run` ("module:function", called as function(Options) -> figures in a
    child process), the figure keys it reports and its estimated seconds (full, tiny)."""

    name: str
    run: str
    keys: tuple[str, ...]
    estimate_s: float
    tiny_estimate_s: float


# ----------------------------------------------------------------------------- the parts

_PROGRESS: list[pathlib.Path] = []   # in a child process: its output file


def progress(figures: dict[str, Any]) -> None:
    """Saves a part's figures so far, so that a part killed at the budget keeps them."""
    if _PROGRESS:
        _write_atomically(_PROGRESS[0], {"figures": figures, "error": None, "finished": False})



def part_peaks(options: Options) -> dict[str, Any]:
    """HBM bandwidth of a large elementwise copy (x + 1: reads and writes every byte) and the FLOP/s
    of a large bf16 matmul (2 n^3 FLOPs), both on random data, median of 10."""
    import flax
    import jax
    import jax.numpy as jnp
    import numpy as np
    import optax

    from benchmarks.timing import median_seconds

    copy_elems = (16 << 20) if options.tiny else (1 << 30)   # bf16: 32 MiB or 2 GiB
    n = 512 if options.tiny else 8192
    key = jax.random.key(0)
    x = jax.random.normal(key, (copy_elems,), jnp.bfloat16)
    bump = jax.jit(lambda v: v + 1)
    copy_s = median_seconds(lambda: bump(x).block_until_ready(), repeats=10, warmup=2)
    a, b = (jax.random.normal(k, (n, n), jnp.bfloat16) for k in jax.random.split(key))
    matmul = jax.jit(lambda p, q: p @ q)
    matmul_s = median_seconds(lambda: matmul(a, b).block_until_ready(), repeats=10, warmup=3)
    device = jax.devices()[0]
    return {
        "hbm_copy_gbps": 2 * x.nbytes / copy_s / 1e9,
        "matmul_bf16_tflops": 2 * n**3 / matmul_s / 1e12,
        "copy_bytes": int(x.nbytes), "matmul_n": n,
        "device_kind": str(device.device_kind), "device_platform": str(device.platform),
        "flax": flax.__version__, "optax": optax.__version__, "numpy": np.__version__,
    }


def model_configs(tiny: bool, dtype) -> dict[str, Any]:
    """MODELS' shapes: SmolLM2-135M and Qwen2.5-1.5B (tiny: the same families at ~100k params)."""
    from agentrl_jax.models.config import ModelConfig
    from benchmarks.model_shapes import SMOLLM2_135M

    if tiny:
        return {"smollm2_135m": ModelConfig.tiny("llama", dtype=dtype),
                "qwen25_1_5b": ModelConfig.tiny("qwen2", dtype=dtype)}
    qwen = ModelConfig(   # Qwen2.5-1.5B-Instruct's config.json
        vocab_size=151936, hidden_size=1536, intermediate_size=8960, num_layers=28, num_heads=12,
        num_kv_heads=2, head_dim=128, family="qwen2", rope_theta=1e6, rms_norm_eps=1e-6,
        qkv_bias=True, tie_word_embeddings=True, max_position_embeddings=32768, dtype=dtype)
    return {"smollm2_135m": SMOLLM2_135M.replace(dtype=dtype), "qwen25_1_5b": qwen}


def _smollm2_weights(dtype):
    """The real SmolLM2-135M-Instruct (the zoo), or None with the reason it is unavailable."""
    try:
        from agentrl_jax.models.hf_io import load_hf
        from agentrl_jax.models.zoo import resolve_model_dir

        return load_hf(resolve_model_dir("smollm2-135m-instruct"), dtype=dtype,
                       param_dtype=dtype), "smollm2-135m-instruct (zoo)"
    except Exception as e:  # noqa: BLE001 - throughput is the same on random weights of its shape
        return None, f"random init of the shape (zoo unavailable: {e!r})"[:300]


def part_sampler(options: Options) -> dict[str, Any]:
    """Decode tok/s and achieved GB/s per model and batch; bf16 weights, KV and compute."""
    import jax.numpy as jnp
    from flax import nnx

    from agentrl_jax.models.decoder import Decoder
    from benchmarks.sampler_gpu import measure_decode

    prompt, new = (32, 17) if options.tiny else (512, 129)
    out: dict[str, Any] = {"sampler_prompt_tokens": prompt, "sampler_new_tokens": new}
    for name, cfg in model_configs(options.tiny, jnp.bfloat16).items():
        model, source = None, "random init of the shape"
        if name == "smollm2_135m" and not options.tiny:
            model, source = _smollm2_weights(jnp.bfloat16)
        if model is None:
            model = Decoder(cfg.replace(param_dtype=jnp.bfloat16), rngs=nnx.Rngs(0))
        out[f"{name}_sampler_weights"] = source
        steps_per_sync = new - 1 if options.tiny else 32
        for batch, r in measure_decode(model, BATCHES, prompt, new, steps_per_sync).items():
            out[f"{name}_decode_tok_s_b{batch}"] = r["decode_tok_s"]
            out[f"{name}_decode_step_ms_b{batch}"] = r["step_ms"]
            out[f"{name}_achieved_gbps_b{batch}"] = r["achieved_gbps"]
            progress(out)
            print(f"{name} b{batch}: {r['decode_tok_s']:.0f} tok/s, {r['step_ms']:.2f} ms/step, "
                  f"{r['achieved_gbps']:.0f} GB/s", flush=True)
        del model
    return out


def part_train(options: Options) -> dict[str, Any]:
    """Train-step tokens/s and model FLOP/s: fp32 parameters, bf16 compute, one micro-batch."""
    import jax.numpy as jnp

    from benchmarks.timing import median_seconds
    from benchmarks.train_step import make_trainer, model_flops

    shapes = {"smollm2_135m": (2, 64), "qwen25_1_5b": (2, 64)} if options.tiny else {
        "smollm2_135m": (16, 2048), "qwen25_1_5b": (8, 2048)}
    args = argparse.Namespace(remat=False, chunk=256, compute_dtype="bfloat16")
    out: dict[str, Any] = {}
    for name, cfg in model_configs(options.tiny, jnp.float32).items():
        batch, length = shapes[name]
        trainer, state, mb = make_trainer(cfg, batch, length, args)
        box = {"state": state}

        def step(trainer=trainer, box=box, mb=mb, tokens=float(batch * length)):
            box["state"], metrics = trainer.step(box["state"], [mb], tokens)
            return metrics   # floats: the update has landed

        step_s = median_seconds(step, repeats=3 if options.tiny else 5, warmup=2)
        out[f"{name}_train_tok_s"] = batch * length / step_s
        out[f"{name}_train_model_tflops"] = model_flops(cfg, batch, length) / step_s / 1e12
        out[f"{name}_train_tokens_per_step"] = batch * length
        progress(out)
        print(f"{name}: {batch}x{length} in {step_s * 1e3:.1f} ms, "
              f"{out[f'{name}_train_tok_s']:.0f} tok/s", flush=True)
        del trainer, state, box
    return out


def learn_command(options: Options, run_dir: pathlib.Path) -> list[str]:
    """launch.local on configs/local_smollm2.py:gpu (tiny: the default's fast mode, same tasks)."""
    from configs.local_smollm2 import GPU_TASKS

    config = "configs/local_default.py:fast" if options.tiny else "configs/local_smollm2.py:gpu"
    flags = [f"--config={config}", f"--config.run_dir={run_dir}"]
    if options.tiny:
        flags += [f"--config.env.tasks={tuple(GPU_TASKS)!r}", "--config.rl.pipeline.steps=1"]
    return [sys.executable, "-m", "launch.local", *flags, *options.learn_flags]


def learning_figures(run_dir: pathlib.Path, started: float) -> dict[str, Any]:
    """Success before/after and stage seconds from a launch.local run directory, as far as it
    got: each stage's time runs from the previous stage's end (the first from `started`)."""
    out: dict[str, Any] = {}
    stages_file = run_dir / "stages.json"
    stages = json.loads(stages_file.read_text()) if stages_file.exists() else {}
    previous = started
    for stage, recorded in zip(LEARN_STAGES, ("demos", "sft", "eval_before", "rl", "eval_after"),
                               strict=True):
        if recorded not in stages:
            break
        out[f"smollm2_{stage}_s"] = stages[recorded]["finished"] - previous
        previous = stages[recorded]["finished"]
    if "report" in stages:
        out["smollm2_job_s"] = stages["report"]["finished"] - started
    for when in ("before", "after"):
        path = run_dir / f"eval_{when}.json"
        if path.exists():
            result = json.loads(path.read_text())
            out[f"smollm2_success_{when}"] = result["average"]["success_mean"]
            for task, row in result["tasks"].items():
                out[f"smollm2_success_{when}_{task.rsplit('-', 1)[0]}"] = row["success_mean"]
    return out


def part_learn(options: Options) -> dict[str, Any]:
    """The main job until the deadline; what it finished by then is reported."""
    if not options.tiny:   # fail at once, not after the demonstrations, when the model is absent
        from agentrl_jax.models.zoo import resolve_model_dir

        resolve_model_dir("smollm2-135m-instruct")
    run_dir = pathlib.Path(options.work_dir) / ("learn_tiny" if options.tiny else "learn")
    shutil.rmtree(run_dir, ignore_errors=True)
    run_dir.mkdir(parents=True)
    command = learn_command(options, run_dir)
    started = time.time()
    timeout = max(options.deadline - started - KILL_GRACE_S / 2, 1.0)
    log = run_dir.parent / (run_dir.name + ".log")
    with open(log, "w") as out:
        process = subprocess.Popen(command, cwd=REPO_ROOT, stdout=out, stderr=subprocess.STDOUT,
                                   start_new_session=True)
        try:
            rc = process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, 9)
            process.wait()
            rc = "timeout"
    figures = learning_figures(run_dir, started)
    figures["smollm2_learn_exit"] = rc
    figures["smollm2_learn_log_tail"] = log.read_text()[-2000:]
    figures["smollm2_warm_start_cached"] = "warm start: cached" in log.read_text()
    figures["smollm2_learn_model"] = ("scratch tiny model (--tiny)" if options.tiny
                                      else "smollm2-135m-instruct")
    if rc != 0:
        raise PartialFailure(figures, f"launch.local ended with {rc}; log {log}")
    return figures


def part_extras(options: Options) -> dict[str, Any]:
    """Each EXTRAS module's `suite_figures(tiny)`; a missing module or hook is a skip."""
    out: dict[str, Any] = {}
    for name, (module_name, _) in EXTRAS.items():
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as e:
            out[f"skipped_{name}"] = f"{module_name} is not here ({e})"
            continue
        hook = getattr(module, HOOK, None)
        if hook is None:
            out[f"skipped_{name}"] = f"{module_name} has no {HOOK}(tiny) yet"
            continue
        try:
            out.update(hook(tiny=options.tiny))
        except Exception as e:  # noqa: BLE001 - one extra failing keeps the other
            out[f"error_{name}"] = repr(e)[:500]
    return out


PARTS = (
    Part("peaks", "benchmarks.gpu_suite:part_peaks", ("hbm_copy_gbps", "matmul_bf16_tflops"),
         30, 20),
    Part("sampler", "benchmarks.gpu_suite:part_sampler",
         tuple(f"{m}_{k}_b{b}" for m in MODELS for k in ("decode_tok_s", "achieved_gbps")
               for b in BATCHES), 110, 40),
    Part("train", "benchmarks.gpu_suite:part_train",
         tuple(f"{m}_{k}" for m in MODELS for k in ("train_tok_s", "train_model_tflops")), 80, 30),
    Part("learn", "benchmarks.gpu_suite:part_learn",
         ("smollm2_success_before", "smollm2_success_after",
          *(f"smollm2_{s}_s" for s in LEARN_STAGES)), 180, 90),
    Part("extras", "benchmarks.gpu_suite:part_extras",
         tuple(k for _, keys in EXTRAS.values() for k in keys), 20, 10),
)
# Figures computed from other parts' figures once all have run.
DERIVED = (*(f"{m}_hbm_fraction_b{b}" for m in MODELS for b in BATCHES),
           *(f"{m}_mfu_vs_matmul_peak" for m in MODELS))


def derived_figures(f: dict[str, Any]) -> dict[str, Any]:
    """hbm_fraction = achieved GB/s ÷ copy GB/s; mfu = model TFLOP/s ÷ matmul TFLOP/s."""

    def ratio(a: str, b: str) -> float | None:
        return f[a] / f[b] if f.get(a) is not None and f.get(b) else None

    out = {}
    for m in MODELS:
        for b in BATCHES:
            out[f"{m}_hbm_fraction_b{b}"] = ratio(f"{m}_achieved_gbps_b{b}", "hbm_copy_gbps")
        out[f"{m}_mfu_vs_matmul_peak"] = ratio(f"{m}_train_model_tflops", "matmul_bf16_tflops")
    return out


# ----------------------------------------------------------------------------- running them


class PartialFailure(Exception):
    """A part failed after measuring some figures; they are kept."""

    def __init__(self, figures: dict[str, Any], message: str):
        super().__init__(message)
        self.figures = figures


def _write_atomically(path: pathlib.Path, result: dict[str, Any]) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(result, default=str))
    tmp.replace(path)   # a kill never leaves a torn file


def run_child(target: str, options: Options, out_path: pathlib.Path) -> None:
    """In the child process: calls `target` and writes {"figures", "error"} to `out_path`."""
    _PROGRESS.append(out_path)
    module_name, function = target.split(":")
    figures: dict[str, Any] = {}
    error = None
    try:
        figures = getattr(importlib.import_module(module_name), function)(options)
    except PartialFailure as e:
        figures, error = e.figures, str(e)
    except Exception as e:  # noqa: BLE001 - reported in the JSON, the suite goes on
        import traceback

        error = "".join(traceback.format_exception(e))[-3000:]
    _write_atomically(out_path, {"figures": figures, "error": error, "finished": True})
    if error:
        print(error, file=sys.stderr)


def run_part(part: Part, options: Options, timeout_s: float) -> tuple[dict[str, Any], str | None]:
    """(figures, error) of one part run in a child process, killed after `timeout_s`."""
    with tempfile.TemporaryDirectory() as tmp:
        out_path = pathlib.Path(tmp) / "part.json"
        command = [sys.executable, "-m", "benchmarks.gpu_suite", "--child", part.run,
                   "--child_out", str(out_path),
                   "--child_options", json.dumps(dataclasses.asdict(options))]
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(
            p for p in (str(REPO_ROOT), os.environ.get("PYTHONPATH", "")) if p)}
        process = subprocess.Popen(command, cwd=REPO_ROOT, env=env, start_new_session=True)
        try:
            rc = process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, 9)
            process.wait()
            rc = None
        result = json.loads(out_path.read_text()) if out_path.exists() else None
    if result is not None and result["finished"]:
        return result["figures"], result["error"]
    figures = result["figures"] if result is not None else {}
    kept = " (its figures so far are kept)" if figures else ""
    if rc is None:
        return figures, f"killed at the budget after {timeout_s:.0f} s{kept}"
    return figures, f"the child process exited with {rc} before it finished{kept}"


def run_suite(parts: Sequence[Part], budget_s: float, options: Options,
              only: Sequence[str] | None = None) -> dict[str, Any]:
    """Runs `parts` (those named in `only`, if given) in order within `budget_s`; the flat JSON
    object of their figures, with every part's keys."""
    start = time.time()
    figures: dict[str, Any] = {k: None for part in parts for k in part.keys}
    figures.update({k: None for k in DERIVED})
    for part in parts:
        if only is not None and part.name not in only:
            figures[f"skipped_{part.name}"] = "not among --parts"
            continue
        left = budget_s - (time.time() - start)
        estimate = part.tiny_estimate_s if options.tiny else part.estimate_s
        if estimate > left:
            figures[f"skipped_{part.name}"] = (f"needs ~{estimate:.0f} s, {max(left, 0):.0f} s "
                                               f"left of the {budget_s:.0f} s budget")
            print(f"== {part.name}: skipped ({figures[f'skipped_{part.name}']})", flush=True)
            continue
        print(f"== {part.name} (~{estimate:.0f} s, {left:.0f} s left)", flush=True)
        part_start = time.time()
        child_options = dataclasses.replace(options, deadline=start + budget_s)
        found, error = run_part(part, child_options, timeout_s=left + KILL_GRACE_S)
        figures.update(found)
        figures[f"part_seconds_{part.name}"] = time.time() - part_start
        if error:
            figures[f"error_{part.name}"] = error
            print(f"== {part.name}: failed: {error.strip().splitlines()[-1]}", flush=True)
    figures.update(derived_figures(figures))
    figures.update(budget_s=budget_s, total_s=time.time() - start, tiny=options.tiny,
                   learn_flags=" ".join(options.learn_flags), reference_points=REFERENCE_POINTS)
    return figures


def write_json(figures: dict[str, Any], path: pathlib.Path) -> None:
    from benchmarks.machine_info import machine_info

    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({**figures, **machine_info(), "load_average": os.getloadavg()},
                               indent=2, sort_keys=True, default=str) + "\n")


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tiny", action="store_true", help="tiny shapes: a CPU smoke run")
    parser.add_argument("--budget_s", type=float, default=DEFAULT_BUDGET_S)
    parser.add_argument("--parts", default=",".join(p.name for p in PARTS))
    parser.add_argument("--out", type=pathlib.Path, default=None)
    parser.add_argument("--work_dir", default=Options.work_dir)
    parser.add_argument("--learn_flag", action="append", default=[],
                        help="a flag for launch.local in the learn part (repeatable)")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--child_out", type=pathlib.Path, help=argparse.SUPPRESS)
    parser.add_argument("--child_options", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        options = json.loads(args.child_options)
        options["learn_flags"] = tuple(options["learn_flags"])
        # Through the imported module, not __main__: the parts' progress() writes its file.
        from benchmarks import gpu_suite

        gpu_suite.run_child(args.child, gpu_suite.Options(**options), args.child_out)
        return
    wanted = args.parts.split(",")
    unknown = set(wanted) - {p.name for p in PARTS}
    if unknown:
        parser.error(f"unknown parts {sorted(unknown)}; known: {[p.name for p in PARTS]}")
    options = Options(tiny=args.tiny, work_dir=args.work_dir, learn_flags=tuple(args.learn_flag))
    figures = run_suite(PARTS, args.budget_s, options, only=wanted)
    out = args.out or (TINY_RESULTS if args.tiny else RESULTS)
    write_json(figures, out)
    shown = {k: v for k, v in figures.items() if isinstance(v, float | int) and v is not None}
    print("\n".join(f"{k:40s} {v:.4g}" for k, v in sorted(shown.items())))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
