"""Compile traced programs and weigh each against its chip: memory, FLOPs, roofline.

Per program and per chip (XLA's `memory_analysis` of the compiled program is per device):

  total     = arguments + outputs − outputs aliased to donated arguments + temporaries
              + generated code + held (other programs' resident buffers, `programs.Program`)
  fits      total <= the chip's HBM. A program whose temporaries alone exceed HBM is refused by
            the compiler itself; its report carries the compiler's figure as `temp_bytes`
  flops, bytes_accessed
            the program's matrix products and the bytes they read (`matmul_cost`: loops
            counted by trip count, which XLA's own cost analysis does not do), shared evenly
            by its chips
  roofline  max(FLOPs / peak bf16 FLOP/s, bytes / HBM bandwidth): the time one call takes
            at best on this chip, as far as its products tell
  mfu_bound for the train step's micro-batch programs: 6 · parameters · tokens of the
            micro-batch (the model FLOPs of a forward and backward) over chips · peak ·
            roofline; the fraction of peak the step could reach at best (remat's and the KL
            reference's forwards are work the bound counts against it)
"""

from __future__ import annotations

import dataclasses
import re
import time
from collections.abc import Iterable

import jax

from agentrl_jax.aot.hardware import GIB, Chip
from agentrl_jax.aot.matmul_cost import jaxpr_cost
from agentrl_jax.aot.programs import Program


@dataclasses.dataclass
class ProgramReport:
    """What the compiler says of one program, per chip (bytes, FLOPs, seconds)."""

    name: str
    role: str
    chips: int
    argument_bytes: float
    output_bytes: float
    alias_bytes: float
    temp_bytes: float
    code_bytes: float
    held_bytes: float
    total_bytes: float
    hbm_bytes: float
    fits: bool
    flops: float
    bytes_accessed: float
    roofline_s: float
    mfu_bound: float | None
    compile_s: float

    @property
    def overshoot_bytes(self) -> float:
        return max(0.0, self.total_bytes - self.hbm_bytes, self.temp_bytes - self.hbm_bytes)


# libtpu's refusal of a program whose temporaries exceed HBM, with its figures (GiB).
_OUT_OF_HBM = re.compile(r"HLO temporaries \(([\d.]+)([KMGT])\) exceeds available HBM")
_UNITS = {"K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}


def _compile(lowered: jax.stages.Lowered) -> jax.stages.Compiled:
    """`lowered.compile()` past the persistent compilation cache: an executable for a device
    this process has no client for could never be loaded back from it."""
    cached = jax.config.values["jax_enable_compilation_cache"]
    jax.config.update("jax_enable_compilation_cache", False)
    try:
        return lowered.compile()
    finally:
        jax.config.update("jax_enable_compilation_cache", cached)


def analyse(program: Program, chip: Chip, model_flops: float | None = None) -> ProgramReport:
    """Compiles `program` and weighs it against `chip`; `model_flops`: the useful FLOPs of one
    call over all its chips (for the MFU bound), or None."""
    start = time.perf_counter()
    lowered = program.traced.lower()
    arguments = outputs = alias = code = 0.0
    try:
        memory = _compile(lowered).memory_analysis()
    except jax.errors.JaxRuntimeError as error:
        refused = _OUT_OF_HBM.search(str(error))
        if refused is None:
            raise
        temp = float(refused.group(1)) * _UNITS[refused.group(2)]
    else:
        if memory is None:
            raise RuntimeError(f"{program.name}: the compiler gave no memory analysis")
        arguments = float(memory.argument_size_in_bytes)
        outputs = float(memory.output_size_in_bytes)
        alias = float(memory.alias_size_in_bytes)
        temp = float(memory.temp_size_in_bytes)
        code = float(memory.generated_code_size_in_bytes)
    compile_s = time.perf_counter() - start
    total = arguments + outputs - alias + temp + code + program.held_bytes
    cost = jaxpr_cost(program.traced.jaxpr)
    flops, accessed = cost.flops / program.chips, cost.bytes / program.chips
    roofline = max(flops / chip.bf16_flops_per_s, accessed / chip.hbm_bytes_per_s)
    mfu = None
    if model_flops is not None and roofline > 0:
        mfu = model_flops / (program.chips * chip.bf16_flops_per_s * roofline)
    fits = total <= chip.hbm_bytes
    return ProgramReport(program.name, program.role, program.chips, arguments, outputs, alias,
                         temp, code, program.held_bytes, total, chip.hbm_bytes, fits, flops,
                         accessed, roofline, mfu, compile_s)


def analyse_all(programs: Iterable[Program], chip: Chip, num_params: int,
                log=print) -> list[ProgramReport]:
    """`analyse` for each program, logging each as it is done (compiles take a while)."""
    reports = []
    for program in programs:
        model_flops = 6.0 * num_params * program.tokens if program.tokens else None
        report = analyse(program, chip, model_flops)
        reports.append(report)
        if log is not None:
            log(row(report))
    return reports


HEADER = (f"{'program (per chip; GiB, GFLOP, GB)':44} {'role':7} {'chips':>5} {'args':>7} "
          f"{'out':>7} {'temp':>7} {'held':>7} {'total':>7} {'of HBM':>6} {'GFLOP':>9} "
          f"{'GB read':>8} {'roofline':>9} {'MFU<=':>6}")


def row(r: ProgramReport) -> str:
    """One table row: memory in GiB per chip, matmul FLOPs and bytes per chip per call."""
    mfu = f"{r.mfu_bound:6.2f}" if r.mfu_bound is not None else f"{'':6}"
    return (f"{r.name:44} {r.role:7} {r.chips:>5} {r.argument_bytes / GIB:7.2f} "
            f"{(r.output_bytes - r.alias_bytes) / GIB:7.2f} {r.temp_bytes / GIB:7.2f} "
            f"{r.held_bytes / GIB:7.2f} {r.total_bytes / GIB:7.2f} "
            f"{r.total_bytes / r.hbm_bytes:6.0%} {r.flops / 1e9:9.1f} "
            f"{r.bytes_accessed / 1e9:8.2f} {r.roofline_s * 1e3:7.2f}ms {mfu}"
            + ("" if r.fits else f"  DOES NOT FIT (+{r.overshoot_bytes / GIB:.2f} GiB)"))


def summary(reports: list[ProgramReport]) -> dict:
    """The figures a results table needs: peak per role, whether all fit, the step's bound."""
    out: dict = {"fits": all(r.fits for r in reports),
                 "programs": len(reports),
                 "compile_s": sum(r.compile_s for r in reports)}
    for role in {r.role for r in reports}:
        peak = max((r for r in reports if r.role == role), key=lambda r: r.total_bytes)
        out[f"{role}_peak_bytes"] = peak.total_bytes
        out[f"{role}_peak_program"] = peak.name
    bounds = [r.mfu_bound for r in reports if r.mfu_bound is not None]
    if bounds:
        out["train_mfu_bound"] = min(bounds)
    return out


def not_fitting(reports: list[ProgramReport]) -> list[str]:
    """One line per program over its chip's HBM: its name, total and overshoot."""
    return [f"{r.name}: {r.total_bytes / GIB:.2f} GiB per chip, {r.overshoot_bytes / GIB:.2f} "
            f"GiB over the chip's {r.hbm_bytes / GIB:.0f} GiB" for r in reports if not r.fits]
