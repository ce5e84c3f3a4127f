"""Which JAX backend a process uses where nothing says: the CPU, unless an accelerator is there.

libtpu is installed for ahead-of-time TPU compilation (`agentrl_jax.aot`); once installed, JAX
probes for a TPU in every process and prints a screen of errors where there is none (and the
probe takes a lock a second process then waits on). So launchers and benchmarks call
`pin_cpu_without_accelerator` before JAX picks a backend.
"""

from __future__ import annotations

import glob
import importlib.util
import os
import pathlib

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
