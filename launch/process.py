"""What every absl launcher does first (`launch.local`, `launch.eval`, `launch.tpu_pod`)."""

from __future__ import annotations

import glob
import importlib.util
import logging
import os
import pathlib
import sys
from collections.abc import Sequence

from absl import app
from absl import logging as absl_logging

GOOGLE_PCI_VENDOR = "0x1ae0"  # a TPU chip on the PCI bus


def pin_cpu_without_accelerator() -> None:
    """On a machine with no TPU chip and no CUDA plugin, sets JAX_PLATFORMS=cpu (unless set):
    libtpu, installed for ahead-of-time TPU compilation, would otherwise probe for a TPU in
    this process and every one it starts, and print its failure. Before any JAX backend."""
    if os.environ.get("JAX_PLATFORMS") or importlib.util.find_spec("jax_cuda12_plugin"):
        return
    vendors = glob.glob("/sys/bus/pci/devices/*/vendor")
    if any(pathlib.Path(v).read_text().strip() == GOOGLE_PCI_VENDOR for v in vendors):
        return
    os.environ["JAX_PLATFORMS"] = "cpu"
    import jax

    jax.config.update("jax_platforms", "cpu")


def begin(argv: Sequence[str]) -> None:
    """Refuse positional arguments (a flag typed without its `--` lands there) and keep the
    console to warnings: absl's INFO lines and httpx's line per request would bury the
    progress bars and the results."""
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {list(argv[1:])}")
    pin_cpu_without_accelerator()
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    absl_logging.set_verbosity(absl_logging.WARNING)
    logging.getLogger("httpx").setLevel(logging.WARNING)
