"""hostmem: the malloc options are opt-in, applied once, and can be switched off."""

import json
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


FREE_A_BLOCK = """
import ctypes, json
import agentrl_jax.hostmem as h
libc = ctypes.CDLL("libc.so.6")
libc.malloc.restype = ctypes.c_void_p
libc.free.argtypes = [ctypes.c_void_p]

def rss_mib():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS"):
            return int(line.split()[1]) // 1024

kept = h.keep_freed_memory()
base = rss_mib()
block = libc.malloc(256 << 20)
ctypes.memset(block, 1, 256 << 20)     # touched: resident
libc.free(block)
after_free = rss_mib() - base
released = h.release_freed_memory()
after_release = rss_mib() - base
block = libc.malloc(256 << 20)         # released: a large block is mmapped and returned again
ctypes.memset(block, 1, 256 << 20)
libc.free(block)
print(json.dumps(dict(kept=kept, released=released, after_free=after_free,
                      after_release=after_release, after_second_free=rss_mib() - base)))
"""


def test_release_hands_the_kept_heap_back_and_large_blocks_return_again():
    out = subprocess.run([sys.executable, "-c", FREE_A_BLOCK], check=True, capture_output=True,
                         text=True).stdout
    figures = json.loads(out)
    assert figures["kept"] and figures["released"]
    assert figures["after_free"] >= 200         # kept: the freed 256 MiB stay resident
    assert figures["after_release"] < 50        # released: handed back
    assert figures["after_second_free"] < 50


def test_release_without_keep_is_a_no_op():
    probe = "import agentrl_jax.hostmem as h; print(h.release_freed_memory())"
    out = subprocess.run([sys.executable, "-c", probe], check=True, capture_output=True,
                         text=True).stdout.split()
    assert out == ["False"]
