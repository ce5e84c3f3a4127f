"""Does a run fit the slice? Every program compiled for the topology, weighed per chip.

    python -m launch.tpu_pod --config=configs/agentbench_fc/qwen25_7b.py \\
        --compile_only --topology=v5p:4x4x4

runs `compile_check` (`programs.run_programs`, then `report.analyse_all`) on a machine with
no TPU: libtpu's compiler builds the programs the run would build, so what does not fit HBM is
found before the slice is rented.
"""

from __future__ import annotations

import dataclasses
import platform
from collections.abc import Callable
from typing import Any

import jax
import ml_collections

from agentrl_jax.aot import hardware, programs, report


def compile_check(config: ml_collections.ConfigDict, topology: str, every_bucket: bool = True,
                  log: Callable[[str], None] | None = print) -> dict[str, Any]:
    """Compiles every program of a run of `config` on `topology` (e.g. "v5p:4x4x4") and
    returns the report (JSON-ready): the slice, the chip's data sheet, one entry per program
    (`report.ProgramReport`) and the summary (`report.summary`). `every_bucket=False`: the
    largest shape of each program only (the memory peaks; a program of a paper config takes
    one to four minutes to compile on a 2-core machine)."""
    devices = hardware.topology_devices(topology)
    chip = hardware.chip_of(devices[0])
    cfg = programs.model_config(config.model)
    lowered = programs.run_programs(config, devices, every_bucket)
    if log is not None:
        log(f"{config.get('name', '')} on {topology}: {len(devices)} {chip.name} chips "
            f"({chip.hbm_bytes / hardware.GIB:.0f} GiB HBM, "
            f"{chip.bf16_flops_per_s / 1e12:.0f} bf16 TFLOP/s, "
            f"{chip.hbm_bytes_per_s / 1e9:.0f} GB/s; {chip.source}); "
            f"{cfg.num_params() / 1e6:,.1f}M parameters; {len(lowered)} programs")
        log(report.HEADER)
    reports = report.analyse_all(lowered, chip, cfg.num_params(), log=log)
    return {"config": config.get("name", ""), "topology": topology, "chips": len(devices),
            "hosts": len({d.process_index for d in devices}),
            "chip": dataclasses.asdict(chip), "parameters": cfg.num_params(),
            "every_bucket": every_bucket, **report.summary(reports),
            "not_fitting": report.not_fitting(reports),
            "program_reports": [dataclasses.asdict(r) for r in reports],
            "jax": jax.__version__, "libtpu": _libtpu_version(), "host": platform.node()}


def _libtpu_version() -> str:
    from importlib import metadata

    try:
        return metadata.version("libtpu")
    except metadata.PackageNotFoundError:
        return ""
