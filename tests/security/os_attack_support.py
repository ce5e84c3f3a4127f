"""What the OS red-team tests share: the problems they attack, workers, scripted agents, probes.

The agents are scripted adversaries: each plays a fixed list of tool calls through a real OS
worker's HTTP API, as a policy that found the attack would.
"""

from __future__ import annotations

import base64
import contextlib
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from environments.oracle import running_worker
from environments.sandbox import cgroup
from environments.sandbox.mounts import host_root
from tests.support.os_agents import Scripted, answer, bash, finish  # noqa: F401 (re-exported)

FIXTURES = Path(__file__).resolve().parent / "os_fixtures"
ROOTFS = Path(os.environ.get("AGENTRL_ROOTFS_CACHE", "/var/cache/agentrl_jax/rootfs"))
COUNT, INSTALL, SYSTEM, MATCH = range(4)   # the problems of os_fixtures/dev.json
COUNT_ANSWER = "3"

needs_root_sandbox = pytest.mark.skipif(
    not (shutil.which("bwrap") and shutil.which("prlimit") and host_root()
         and cgroup.available() and (ROOTFS / "default" / "usr").is_dir()),
    reason="needs host root, bubblewrap, cgroup v1 memory+cpu and the default image "
           "(bash scripts/setup.sh as root)")


def replies(record) -> list[str]:
    return [m["content"] for m in record.messages if m["role"] == "tool"]


@contextlib.contextmanager
def os_worker(log_path: Path | None = None, **params) -> Iterator[str]:
    """A real OS worker over HTTP serving the fixture problems (`params`: OSTask's)."""
    with running_worker("os_interaction", {"split": "test", "data_dir": str(FIXTURES),
                                           **params}, log_path=log_path) as api:
        yield api


def exit_zero_library(tmp_dir: Path) -> bytes | None:
    """A shared library whose constructor makes any program that loads it exit 0 at once.

    None without a C compiler on the host (the image has none).
    """
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        return None
    source, library = tmp_dir / "exit0.c", tmp_dir / "exit0.so"
    source.write_text("#include <unistd.h>\n"
                      "__attribute__((constructor)) static void quit(void) { _exit(0); }\n")
    subprocess.run([cc, "-shared", "-fPIC", "-O2", "-s", "-o", str(library), str(source)],
                   check=True, capture_output=True)
    return library.read_bytes()


def write_file_script(path: str, data: bytes) -> str:
    """A bash script that writes `data` to `path` inside the machine."""
    return f"echo {base64.b64encode(data).decode()} | base64 -d > {path}"


def available_memory_bytes() -> int:
    with open("/proc/meminfo") as f:
        fields = dict(line.split(":", 1) for line in f)
    return int(fields["MemAvailable"].split()[0]) * 1024


def shm_used_bytes() -> int:
    usage = shutil.disk_usage("/dev/shm")
    return usage.used


def child_pids() -> list[int]:
    """Pids of this process's children (the workers `running_worker` started)."""
    me, children = os.getpid(), []
    for name in os.listdir("/proc"):
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                if int(f.read().rsplit(b")", 1)[1].split()[1]) == me:
                    children.append(int(name))
        except (OSError, ValueError, IndexError):
            continue
    return children
