"""hostmem: the malloc options are opt-in, applied once, and can be switched off."""

import os
import platform
import subprocess
import sys

import pytest

pytestmark = pytest.mark.skipif(
    platform.system() != "Linux" or platform.libc_ver()[0] != "glibc", reason="glibc only")

PROBE = ("import agentrl_jax.hostmem as h; before = h._applied; "
         "print(before, h.keep_freed_memory(), h.keep_freed_memory())")


def _run(**env) -> str:
    return subprocess.run([sys.executable, "-c", PROBE], check=True, capture_output=True,
                          text=True, env={**os.environ, **env}).stdout.split()


def test_importing_the_package_leaves_malloc_alone_and_the_call_applies_it():
    assert _run() == ["False", "True", "True"]


def test_the_environment_switch_turns_it_off():
    assert _run(AGENTRL_JAX_KEEP_FREED_MEMORY="0") == ["False", "False", "False"]
