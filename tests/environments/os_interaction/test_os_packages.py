"""Package managers offline (issue #31): `apt update`, `apt install`, `apt remove` and
`pip install` in an OS machine, from its image's own repository and wheelhouse, no network.

AgentBench's containers have a network, and its problems install with apt (sudo, net-tools,
iproute2, lsof). Each image now carries what they install (build_rootfs.sh, "Offline package
sources"), and the grader finds what the agent installed from there (offline_packages.py).
Needs host root, bwrap, cgroup v1 with the freezer, and images built with the offline sources.
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
from collections.abc import Iterator

import pytest

from environments.oracle import play_one
from environments.os_interaction.machine import Machine, MachineSpec, default_rootfs_dir, image_path
from environments.os_interaction.oracle import Oracle
from environments.sandbox import cgroup
from environments.sandbox.mounts import host_root
from environments.sandbox.offline_packages import offline_repo
from tests.support.os_agents import Problems, Scripted, bash, finish, overlay_worker, write_problems

IMAGES = {name: image_path(name, default_rootfs_dir()) for name in ("default", "ubuntu")}
pytestmark = pytest.mark.skipif(
    not (shutil.which("bwrap") and host_root() and cgroup.freezer_available()
         and all(i is not None and offline_repo(str(i)) for i in IMAGES.values())),
    reason="needs host root, bubblewrap, cgroup v1 with the freezer and the default and ubuntu "
           "images built with their offline package sources (bash scripts/setup.sh as root)")

# AgentBench's own problems that install with apt (its data/os_interaction: 6/new.json, the
# init script 2/init/install_nettools.sh), as they are there.
SUDO_CHECK = {"code": "sudo whoami | if [ \"$(cat -)\" = \"root\" ]; then exit 0; else exit 1; fi"}
SUDOERS = ("echo 'Defaults        env_reset\nDefaults        mail_badpass\nDefaults        "
           "secure_path=\"/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin:/snap/bin\""
           "\nroot    ALL=(ALL:ALL) ALL\n%admin ALL=(ALL) ALL\n%sudo   ALL=(ALL:ALL) ALL' > "
           "/etc/sudoers")
PROBLEMS = [
    {"description": "Why can't I use sudo?? fix it.",
     "create": {"init": {"code": "apt remove sudo"}},
     "evaluation": {"check": SUDO_CHECK,
                    "example": {"code": "apt update && apt install sudo -y"}}},
    {"description": "Why can't I use sudo? Help me fix it.",
     "create": {"init": {"code": "apt update && apt install sudo -y && echo '' > /etc/sudoers"}},
     "evaluation": {"check": SUDO_CHECK, "example": {"code": SUDOERS}}},
    {"description": "Are the network tools there?",
     "create": {"init": {"code": "apt-get update && apt-get install -y net-tools iproute2 lsof"}},
     "evaluation": {"check": {"code": "netstat --version && ss -V && lsof -v"},
                    "example": {"code": "true"}}},
]
FIX_WITH_APT, FIX_SUDOERS, NET_TOOLS = range(3)
NO_NETWORK_SOURCE = re.compile(r"(https?|ftp)://")


def repo_inside(image: str) -> str:
    """Where the machines of `image` see its offline apt repository."""
    path = str(IMAGES[image])
    return "/" + os.path.relpath(offline_repo(path) or path, path)


def in_machine(image: str, *scripts: str) -> list[tuple[str, str]]:
    """(stdout and stderr, exit status) of each script, one after the other in one overlay
    machine's shell."""
    async def go() -> list[tuple[str, str]]:
        machine = await Machine.start(MachineSpec(image=str(IMAGES[image]), root="overlay",
                                                  scratch_dir="/dev/shm/agentrl_os"))
        try:
            results = []
            for script in scripts:
                output, timed_out = await machine.run(
                    f"{{ {script}\n}} 2>&1\necho \"status $?\"", timeout=240)
                assert not timed_out, (script, output)
                body, _, status = output.rpartition("status ")
                results.append((body, status.split("\n")[0]))
            return results
        finally:
            await machine.close()
    return asyncio.run(go())


def test_apt_and_pip_install_and_remove_from_the_images_own_sources():
    (sources, _), (update, updated), (install, installed), (tools, _), (remove, removed), \
        (pip, pipped), (net, _) = in_machine(
            "default",
            "cat /etc/apt/sources.list /etc/apt/sources.list.d/* /etc/pip.conf 2>/dev/null",
            "apt update",
            "apt install -y sudo net-tools iproute2 lsof",
            "sudo whoami; netstat --version | head -1; ip -V; dpkg-query -W -f '${Version}' sudo",
            "apt remove -y net-tools; command -v netstat || echo gone",
            "pip install requests 2>&1 && python3 -c 'import requests; print(requests.get)'",
            "python3 -c 'import socket; socket.create_connection((\"1.1.1.1\", 80), 2)' 2>&1")
    repo = repo_inside("default")
    assert f"file:{repo} ./" in sources and not NO_NETWORK_SOURCE.search(sources), sources
    assert updated == "0" and not re.search(r"^(Err|W|E):", update, re.M), update
    assert installed == "0" and "Setting up sudo" in install, install
    root, net_tools, ip, version = tools.splitlines()
    assert root == "root" and net_tools.startswith("net-tools ") and "iproute2-" in ip, tools
    assert removed == "0" and remove.rstrip().endswith("gone"), remove
    assert pipped == "0" and "Successfully installed" in pip and "<function get" in pip, pip
    assert "Network is unreachable" in net, net   # the machine still has no network
    # What a machine does to its copy of the repository stays in it: the next machine installs
    # the same version from the image's files.
    (broken, broken_status), = in_machine(
        "default", f"rm {repo}/*.deb && apt update >/dev/null 2>&1; "
        "apt install -y sudo >/tmp/out 2>&1; s=$?; tail -1 /tmp/out; (exit $s)")
    (again, again_status), = in_machine(
        "default", "apt update >/dev/null 2>&1 && apt install -y sudo >/dev/null 2>&1 && "
        "dpkg-query -W -f '${Version}' sudo")
    assert broken_status == "100" and "Unable to fetch some archives" in broken, broken
    assert (again_status, again) == ("0", version)


def test_the_bare_image_installs_python_and_pip_from_them():
    """`ubuntu` (AgentBench's bare image) has neither; an agent installs both."""
    (listed, listed_status), (install, status), (pip, pip_status) = in_machine(
        "ubuntu", "apt install -y tree",
        "apt update >/dev/null 2>&1 && apt install -y python3-pip >/dev/null 2>&1; "
        "python3 --version",
        "pip install tabulate >/dev/null 2>&1; python3 -c 'import tabulate; print(\"ok\")'")
    # As in a container: no package lists until `apt update`.
    assert listed_status == "100" and "Unable to locate package tree" in listed, listed
    assert status == "0" and install.startswith("Python 3"), install
    assert (pip_status, pip) == ("0", "ok\n"), pip


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    return write_problems(tmp_path_factory.mktemp("os_packages"), PROBLEMS)


@pytest.fixture(scope="module")
def worker(data_dir) -> Iterator[str]:
    with overlay_worker(data_dir) as api:
        yield api


@pytest.mark.parametrize("index", [FIX_WITH_APT, FIX_SUDOERS, NET_TOOLS])
def test_agentbenchs_apt_problems_pass_with_the_reference_solution(worker, data_dir, index):
    """Their init scripts install offline, and the grader finds what the agent installed."""
    record = play_one(worker, Oracle(Problems(data_dir)), index, session_id=400 + index)
    assert (record.status, record.reward) == ("completed", 1.0), str(record.metrics)


def test_the_grader_takes_the_repositorys_package_not_the_agents_copy(worker):
    """An agent that installs sudo and replaces it with a fake does not pass the check."""
    fake = ("apt install -y sudo >/dev/null 2>&1 && printf '#!/bin/sh\\necho root\\n' > "
            "/usr/bin/sudo && sudo whoami")
    record = play_one(worker, Scripted(bash(fake), finish()), FIX_SUDOERS, session_id=410)
    tool = [m["content"] for m in record.messages if m["role"] == "tool"][0]
    assert tool == "The output of the OS:\n\nroot\n", tool   # the fake, in the agent's shell
    assert (record.status, record.reward) == ("completed", 0.0), record.metrics
