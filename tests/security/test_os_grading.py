"""Red team: an agent that forges the OS task's grading scores 0 (issue #16, item 2).

Each attack is played through a real worker's HTTP API on a check problem whose true answer is 3:
the agent plants the forgery, shows in its own shell that it works there (the demo reply), then
answers 7. Graded as AgentBench grades (check scripts in the agent's shell or container), each of
these would score 1; here the checks run in a fresh process on the image's own tools.
"""

from __future__ import annotations

import pytest
from os_attack_support import (
    ATTACKS,
    COUNT,
    COUNT_ANSWER,
    DEMO,
    FAKE,
    HIJACK,
    INSTALL,
    SYSTEM,
    Paced,
    Scripted,
    answer,
    bash,
    demo_for,
    exit_zero_library,
    finish,
    needs_root_sandbox,
    os_worker,
    replies,
    write_file_script,
)

from environments.oracle import play_one

pytestmark = needs_root_sandbox

READ_ONLY_USR = {"system_binaries", "bin_sh"}   # attacks that write /usr outside /usr/local


@pytest.fixture(scope="module", params=["overlay", "seeded"])
def root(request):
    """The machine's root: the copy-on-write overlay, or the read-only image with writable
    directories seeded from it (what a worker that cannot mount uses)."""
    return request.param


@pytest.fixture(scope="module")
def worker(root):
    with os_worker(root=root) as api:
        yield api


@pytest.mark.parametrize("name", sorted(ATTACKS))
def test_forgery_scores_zero(worker, root, name):
    record = play_one(worker, Scripted(bash(ATTACKS[name]), bash(demo_for(name)), answer("7")),
                      COUNT)
    if root == "seeded" and name in READ_ONLY_USR:
        assert "rc=1" in replies(record)[1]   # /usr is read-only there: no forgery to plant
    else:
        assert "rc=0" in replies(record)[1], replies(record)   # it works in the agent's shell
    assert (record.status, record.reward) == ("completed", 0.0), record.metrics


def test_honest_answer_still_scores_one_after_the_attacks(worker):
    # The grader runs on the image's tools even when the agent changed the system harmlessly.
    record = play_one(worker, Scripted(bash(ATTACKS["path"]), answer(COUNT_ANSWER)), COUNT)
    assert (record.status, record.reward) == ("completed", 1.0), record.metrics


def test_hijacked_shell_pipe_scores_zero(worker):
    record = play_one(worker, Paced(bash(HIJACK), bash("echo rc=1"), answer("7")), COUNT)
    # The hijacker answers the shell's protocol itself: the command's real output never comes.
    assert "rc=1" not in replies(record)[1]
    assert (record.status, record.reward) == ("completed", 0.0), record.metrics


def test_preloaded_library_scores_zero(worker, tmp_path):
    library = exit_zero_library(tmp_path)
    if library is None:
        pytest.skip("no C compiler on the host to build the preload library")
    plant = write_file_script("/root/exit0.so", library)
    record = play_one(worker, Scripted(
        bash(f"{plant} && export LD_PRELOAD=/root/exit0.so"), bash(DEMO),
        bash("unset LD_PRELOAD; echo /root/exit0.so > /etc/ld.so.preload"), bash(DEMO),
        answer("7")), COUNT)
    assert "rc=0" in replies(record)[1] and "rc=0" in replies(record)[3], replies(record)
    assert (record.status, record.reward) == ("completed", 0.0), record.metrics


@pytest.mark.parametrize("directory", ["/bin", "/lib64"])
def test_replaced_system_directory_scores_zero(worker, root, directory):
    if root == "seeded":
        pytest.skip("/bin and /lib64 are the read-only image's in a seeded root")
    # /bin and /lib64 are links into /usr: a directory of fakes in their place would supply the
    # grader's shell or dynamic linker. The grader refuses such a machine.
    plant = (f"{FAKE}; rm {directory} && mkdir {directory} && "
             f"for c in sh bash ld-linux-x86-64.so.2; do cp /tmp/fake {directory}/$c; done")
    record = play_one(worker, Scripted(bash(plant), answer("7")), COUNT)
    assert (record.status, record.reward) == ("completed", 0.0), record.metrics
    assert "replaced" in record.metrics["detail"]


def test_agent_changes_stay_visible_to_the_check(worker, root):
    # A command the agent installs in /usr/local/bin is what this problem checks.
    installed = play_one(worker, Scripted(bash(
        "printf '#!/bin/sh\\necho hello\\n' > /usr/local/bin/hello && "
        "chmod +x /usr/local/bin/hello"), finish()), INSTALL)
    assert (installed.status, installed.reward) == ("completed", 1.0), installed.metrics
    if root == "seeded":
        return   # its init writes /usr/stock.log, which a seeded root cannot
    # Files the init wrote at /usr and /etc (a user) are read by the reference check there.
    system = play_one(worker, Scripted(answer("3")), SYSTEM)
    assert (system.status, system.reward) == ("completed", 1.0), system.metrics
