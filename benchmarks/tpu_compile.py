"""Every paper config compiled for the smallest v5p slice it fits, by libtpu's compiler here.

    python -m benchmarks.tpu_compile          # the notebook's job on one Colab chip (v6e)
    python -m benchmarks.tpu_compile --all    # and every configs/agentbench_fc model, the
                                              # LoRA ablation (about an hour on 2 cores)

For each config the slices are tried smallest first (v5p, 4 chips a host): a slice whose
layout the config cannot make, or where what stays resident (`aot.programs.resident_bytes`)
already exceeds a chip, is passed over without compiling; on the first other one every
program is compiled at its largest shape (`compile_check`, `every_bucket=False`) and the
search stops there if all fit, or if only sampler programs do not (a larger slice adds trainer
chips, not a larger sampler replica). One config is also compiled on a slice of two hosts,
for the weight gather's programs. Beside each result, the capacity model's prediction
(`benchmarks/pod_model.py`) for the same split, and their ratio.

Writes benchmarks/results/tpu_compile.json: per config, the slice, whether it fits, each
role's peak GiB per chip and its program, the train step's roofline and MFU bound, and the
capacity model's figures; the full per-program reports go to tpu_compile_programs.json.
"""

from __future__ import annotations

import argparse
import importlib
import json
import pathlib
import re
import subprocess
import sys
import tempfile
import time

from agentrl_jax.aot import hardware, programs
from agentrl_jax.aot.compile_check import compile_check
from benchmarks import pod_model
from benchmarks.machine_info import RESULTS_DIR, write_result

SLICES = ("v5p:2x2x1", "v5p:2x2x2", "v5p:2x2x4", "v5p:2x4x4", "v5p:4x4x4")
# What --all compiles, in order: a name is searched over SLICES; NAME@TOPOLOGY is compiled on
# that slice alone (here a slice of two hosts, for the weight gather's programs); "notebook"
# is the notebook's job on a Colab TPU runtime, the default run.
NOTEBOOK = "notebook"
ALL = ("qwen25_3b", "qwen25_7b", "qwen25_14b", "qwen25_32b", "ablations:lora", NOTEBOOK,
       "qwen25_7b@v5p:2x2x2", "glm4_9b")


def job(key: str) -> tuple[str, tuple[str, ...]]:
    """(config name, slices to try) of an entry of ALL."""
    if key == NOTEBOOK:
        return "local_tictactoe", ("v6e:1x1",)
    name, _, topology = key.partition("@")
    return name, (topology,) if topology else SLICES


def load(name: str):
    """A config by short name: a configs/agentbench_fc model, `ablations:ABLATION`, or a
    configs/ file."""
    if name.startswith("ablations:"):
        from configs.agentbench_fc import ablations

        return ablations.get_config(name.split(":", 1)[1])
    try:
        return importlib.import_module(f"configs.agentbench_fc.{name}").get_config()
    except ModuleNotFoundError:
        return importlib.import_module(f"configs.{name}").get_config()


def screen(config, topology: str) -> str | None:
    """Why `config` cannot fit `topology` without compiling anything, or None."""
    devices = hardware.topology_devices(topology)
    try:
        resident = programs.resident_bytes(config, devices)
    except ValueError as error:  # the layout cannot be made on this slice
        return f"layout: {error}"
    chip = hardware.chip_of(devices[0])
    over = {role: b for role, b in resident.items() if b > chip.hbm_bytes}
    if over:
        return "resident " + ", ".join(f"{role} {b / hardware.GIB:.1f} GiB" for role, b in
                                       over.items()) + f" > {chip.hbm_bytes / hardware.GIB:.0f}"
    return None


def beside_model(result: dict) -> dict[str, float]:
    """The capacity model's per-chip figures for this split (`benchmarks/pod_model.py`'s
    ASSUMED) over the compiler's: the trainer's state (weights, moments, gradient; the
    update's arguments), the trainer's peak against the model's allowance (state and KL
    reference, with `trainer_activation_share` of HBM left for activations), and the sampler's
    weight copies plus KV pool (a decode call's arguments and what it holds) against the
    model's copies alone."""
    a = pod_model.ASSUMED
    reports = {r["name"]: r for r in result.get("program_reports", [])}
    chips = {r["role"]: r["chips"] for r in reports.values()}
    n = result.get("parameters", 0)
    out: dict[str, float] = {}
    if "train_apply" in reports and n:
        model = n * a["trainer_bytes_per_param"] / chips["trainer"]
        out["trainer_state_model_gib"] = model / hardware.GIB
        out["trainer_state_compiler_vs_model"] = reports["train_apply"]["argument_bytes"] / model
        need = (n * (a["trainer_bytes_per_param"] + a["reference_bytes_per_param"])
                / chips["trainer"] / (1 - a["trainer_activation_share"]))
        out["trainer_peak_compiler_vs_model_allowance"] = result["trainer_peak_bytes"] / need
    decode = [r for r in reports.values() if r["name"].startswith("decode")]
    if decode and n:
        copies = n * a["sampler_param_bytes"] * a["sampler_weight_copies"] / chips["sampler"]
        out["sampler_copies_model_gib"] = copies / hardware.GIB
        held = decode[-1]["argument_bytes"] + decode[-1]["held_bytes"]
        out["sampler_resident_compiler_vs_model_copies"] = held / copies
    return out


def run(name: str, slices: tuple[str, ...], log, on_attempt=None) -> dict:
    """Searches `slices` for `name`'s smallest fit; `on_attempt(tried, topology)` before each
    compilation (what was passed over so far, and the slice about to be compiled)."""
    config = load(name)
    tried = {}
    for topology in slices:
        reason = screen(config, topology)
        if reason is not None:
            tried[topology] = reason
            log(f"{name} on {topology}: passed over ({reason})")
            continue
        if on_attempt is not None:
            on_attempt(tried, topology)
        result = compile_check(config, topology, every_bucket=False, log=log)
        # A larger slice adds trainer chips, never a larger sampler replica (the model files
        # fix its size): where only sampler programs overflow, no slice will fit.
        sampler_only = all(r["role"] == programs.SAMPLER for r in result["program_reports"]
                           if not r["fits"])
        if result["fits"] or sampler_only or topology == slices[-1]:
            result["passed_over"] = tried
            return result
        tried[topology] = "compiled: " + "; ".join(result["not_fitting"])
    return {"config": name, "fits": False, "passed_over": tried}


def run_isolated(key: str) -> dict:
    """`run(*job(key))` in a child process. libtpu aborts its process on an internal compiler
    error (a failed check), and one config's abort must not lose the others': the result then
    says which slice was being compiled and the compiler's message."""
    name, slices = job(key)
    with tempfile.TemporaryDirectory() as tmp:
        out = pathlib.Path(tmp) / "result.json"
        child = subprocess.run([sys.executable, "-m", "benchmarks.tpu_compile", "--entry", key,
                                "--entry_out", str(out)], stderr=subprocess.PIPE, text=True)
        written = json.loads(out.read_text()) if out.exists() else {}
    if child.returncode == 0 and "result" in written:
        return written["result"]
    errors = [line for line in child.stderr.splitlines()
              if "Check failed" in line or "Error" in line]
    message = _without_log_prefix((errors or child.stderr.splitlines()[-5:]
                                   or ["(no message)"])[-1])
    print(f"{key}: the compiling process ended with {child.returncode}: {message}")
    return {"config": name, "fits": False, "passed_over": written.get("passed_over", {}),
            "compiler_abort": {"topology": written.get("compiling"), "exit": child.returncode,
                               "message": message}}


def _without_log_prefix(line: str) -> str:
    """A libtpu log line without its `F1207 00:32:08.867040   28541 ` prefix: from the source
    location on (`file.cc:123] message`)."""
    match = re.match(r"[FEWI]\d{4} \S+\s+\d+ (.*)", line.strip())
    return match.group(1) if match else line.strip()


def _entry(key: str, out: pathlib.Path) -> None:
    """The child of `run_isolated`: progress, then the result, written to `out`."""
    def on_attempt(tried: dict, topology: str) -> None:
        out.write_text(json.dumps({"passed_over": tried, "compiling": topology}))

    result = run(*job(key), print, on_attempt)
    out.write_text(json.dumps({"result": result}))


def flat(name: str, result: dict) -> dict:
    """The figures of one config for the flat results JSON (GiB, seconds)."""
    gib = hardware.GIB
    out = {f"{name}/fits": bool(result.get("fits")), f"{name}/topology": result.get("topology")}
    if "compiler_abort" in result:
        out[f"{name}/compiler_abort"] = (
            f"{result['compiler_abort']['topology']}: "
            f"{_without_log_prefix(result['compiler_abort']['message'])}")
    for key in ("trainer", "sampler", "sync"):
        if f"{key}_peak_bytes" in result:
            out[f"{name}/{key}_peak_gib"] = result[f"{key}_peak_bytes"] / gib
            out[f"{name}/{key}_peak_program"] = result[f"{key}_peak_program"]
    reports = result.get("program_reports", [])
    train = [r for r in reports if r["name"].startswith("train_accumulate")]
    if train:
        out[f"{name}/train_micro_roofline_s"] = train[-1]["roofline_s"]
        out[f"{name}/train_mfu_bound"] = train[-1]["mfu_bound"]
    if result.get("hosts", 0) and "ablations" not in name and name != NOTEBOOK:
        out.update({f"{name}/{k}": v for k, v in beside_model(result).items()})
    if "compile_s" in result:
        out[f"{name}/compile_s"] = result["compile_s"]
    return out


def markdown(results: dict) -> str:
    """The results table of docs/tpu_pod.md."""
    gib = hardware.GIB
    lines = ["| config | slice | fits | trainer GiB a chip (peak program) | sampler GiB a chip "
             "(peak program) | train micro-batch roofline | MFU bound | smaller slices |",
             "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for name, r in results.items():
        reports = r.get("program_reports", [])
        train = [x for x in reports if x["name"].startswith("train_accumulate")]
        peak = {role: f"{r[f'{role}_peak_bytes'] / gib:.1f} ({r[f'{role}_peak_program']})"
                for role in ("trainer", "sampler") if f"{role}_peak_bytes" in r}
        over = [f"{t}: {why}" for t, why in r.get("passed_over", {}).items()]
        if "compiler_abort" in r:
            abort = r["compiler_abort"]
            over.append(f"{abort['topology']}: libtpu aborted compiling "
                        f"({_without_log_prefix(abort['message'])})")
        over = "; ".join(over) or "—"
        lines.append(
            f"| {name} | {r.get('topology', '—')} | {'yes' if r.get('fits') else 'no'} | "
            f"{peak.get('trainer', '—')} | {peak.get('sampler', '—')} | "
            + (f"{train[-1]['roofline_s'] * 1e3:.0f} ms | {train[-1]['mfu_bound']:.2f} | "
               if train else "— | — | ") + f"{over} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--all", action="store_true", help="every paper config too")
    parser.add_argument("--table", action="store_true",
                        help="print the markdown table of the last run's results and stop")
    parser.add_argument("--add", metavar="CONFIG[@TOPOLOGY]",
                        help="compile one more entry into the last run's results")
    parser.add_argument("--entry", help=argparse.SUPPRESS)   # run_isolated's child
    parser.add_argument("--entry_out", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.entry:
        _entry(args.entry, pathlib.Path(args.entry_out))
        return {}
    if args.add:
        results = json.loads((RESULTS_DIR / "tpu_compile_programs.json").read_text())
        results[args.add] = run_isolated(args.add)
        (RESULTS_DIR / "tpu_compile_programs.json").write_text(json.dumps(results, indent=1)
                                                              + "\n")
        args.table = True
    if args.table:  # the table, and the flat figures again, from the last run's reports
        results = json.loads((RESULTS_DIR / "tpu_compile_programs.json").read_text())
        print(markdown(results))
        figures = {k: v for name, r in results.items() for k, v in flat(name, r).items()}
        path = RESULTS_DIR / "tpu_compile.json"  # the last complete run's wall_s, if any
        last = json.loads(path.read_text()) if path.exists() else {}
        print(f"written {write_result('tpu_compile', {**last, **figures})}")
        return figures
    start = time.perf_counter()
    results = {}
    for key in ALL if args.all else (NOTEBOOK,):
        results[key] = run_isolated(key)
        # after each config: a long run stopped midway keeps what it compiled
        (RESULTS_DIR / "tpu_compile_programs.json").write_text(json.dumps(results, indent=1)
                                                              + "\n")
    figures = {}
    for name, result in results.items():
        figures.update(flat(name, result))
    figures["wall_s"] = time.perf_counter() - start
    print("\nconfig            slice        fits  trainer GiB  sampler GiB  MFU bound")
    for name, result in results.items():
        f = flat(name, result)
        print(f"{name:17} {str(f[f'{name}/topology']):12} {str(f[f'{name}/fits']):5} "
              f"{f.get(f'{name}/trainer_peak_gib', float('nan')):11.1f} "
              f"{f.get(f'{name}/sampler_peak_gib', float('nan')):12.1f} "
              f"{f.get(f'{name}/train_mfu_bound') or float('nan'):10.2f}")
    print(f"written {write_result('tpu_compile', figures)}")
    return figures


if __name__ == "__main__":
    main()
