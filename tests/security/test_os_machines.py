"""The OS worker's machines: built from their image or refused, writable, and thrown away.

Issue #16, items 0 and 1, through a real worker's HTTP API.
"""

from __future__ import annotations

import pytest
from os_attack_support import (
    MATCH,
    ROOTFS,
    SYSTEM,
    Scripted,
    answer,
    bash,
    needs_root_sandbox,
    os_worker,
    replies,
)

from environments.oracle import play_one

pytestmark = needs_root_sandbox


def test_worker_refuses_to_start_without_its_image(tmp_path):
    log = tmp_path / "worker.log"
    with pytest.raises(RuntimeError, match="before listening"):
        with os_worker(log_path=log, rootfs_dir=str(tmp_path)):
            pass
    reason = log.read_text()
    assert "['default'] are not built" in reason and "scripts/setup.sh" in reason


def test_host_fallback_only_when_allowed(tmp_path):
    with os_worker(rootfs_dir=str(tmp_path), allow_host_fallback=True) as api:
        record = play_one(api, Scripted(answer("ok")), MATCH)
    assert (record.status, record.reward) == ("completed", 1.0)
    assert (record.metrics["image"], record.metrics["root"]) == ("host", "host")


@pytest.fixture(scope="module")
def worker():
    with os_worker() as api:
        yield api


def test_root_is_writable_like_a_container(worker):
    record = play_one(worker, Scripted(bash(
        "mkdir /working2 && echo x > /usr/stock2.log && echo y > /top.txt && "
        "useradd -m bob && chmod 700 /usr/bin/find && ls -ld /working2 /top.txt && "
        "stat -c '%a %U' /usr/bin/find /usr/stock2.log && id -un && grep -c ^bob: /etc/passwd"),
        answer("ok")), MATCH)
    reply = replies(record)[0]
    assert "Read-only" not in reply and "cannot" not in reply, reply
    assert "700 root\n644 root\nroot\n1\n" in reply, reply
    assert record.metrics["root"] == "overlay"


def test_init_scripts_that_write_the_system_run(worker):
    # The fixture's init does mkdir /working, writes /usr/stock.log and adds a user.
    record = play_one(worker, Scripted(bash("cat /working/note; wc -l < /usr/stock.log"),
                                       answer("3")), SYSTEM)
    assert replies(record)[0].endswith("hi\n2\n")
    assert (record.status, record.reward) == ("completed", 1.0)


def test_root_is_discarded_with_the_session(worker):
    first = play_one(worker, Scripted(bash("echo mine > /usr/left_behind"), answer("ok")), MATCH)
    assert first.reward == 1.0
    second = play_one(worker, Scripted(bash("cat /usr/left_behind"), answer("ok")), MATCH)
    assert "No such file" in replies(second)[0]
    assert not (ROOTFS / "default" / "usr" / "left_behind").exists()   # the image is untouched
