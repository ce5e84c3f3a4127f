"""environments/registry.py: task keys and their exact parse, the registered tasks, and the
promise of docs/adding_a_task.md that a new task is its folder and nothing else.

The last test takes the worked example's files from the page as written, puts them in a
throwaway `environments/arithmetic/` folder outside the repository (any `environments/`
directory on the path contributes task folders), and shows, in fresh processes, that the task
is registered, that its controller name is its task key, that the fleet serves both splits by
those keys, and that its oracle solves the test split through a real worker: with no edit to
any other file.
"""

from __future__ import annotations

import json
import os
import pathlib
import re
import subprocess
import sys

import pytest

from agentrl_jax.controller.task_keys import TaskKey, parse_task_key, task_key
from environments.registry import AGENTBENCH_FC, load_task, task_names

REPO_ROOT = pathlib.Path(__file__).resolve().parents[2]
GUIDE = REPO_ROOT / "docs" / "adding_a_task.md"


def test_keys_are_task_dash_split_and_parse_back_exactly():
    assert task_key("os_interaction", "test") == "os_interaction-test"
    assert parse_task_key("os_interaction-test") == TaskKey("os_interaction", "test")
    assert parse_task_key("dbbench-env_train") == ("dbbench", "env_train")   # AgentRL's names
    for task in task_names():
        for split in ("train", "test"):
            assert parse_task_key(task_key(task, split)) == (task, split)


@pytest.mark.parametrize("key", ["db", "db-", "-test", "db-test-2", "os-interaction-test",
                                 "db test-x", "db-te st", "", "db/x-test", "db-test/success"])
def test_malformed_keys_are_rejected(key):
    with pytest.raises(ValueError, match="not a task key"):
        parse_task_key(key)


@pytest.mark.parametrize("task,split", [("os-interaction", "test"), ("db", "te-st"), ("", "test"),
                                        ("db", ""), ("db", "a/b")])
def test_keys_that_would_not_parse_are_never_built(task, split):
    with pytest.raises(ValueError, match="cannot be part of a task key"):
        task_key(task, split)


def test_every_task_is_named_by_its_key():
    assert set(AGENTBENCH_FC) <= set(task_names())
    db = load_task("db", split="test")
    assert db.name == task_key("db", "test")


def guide_file(path: str) -> str:
    """The code block that docs/adding_a_task.md gives for `path`."""
    match = re.search(rf"`{re.escape(path)}`:\n\n```python\n(.*?)```", GUIDE.read_text(), re.S)
    assert match, f"docs/adding_a_task.md shows no {path}"
    return match.group(1)


# Run in a fresh interpreter whose path holds the throwaway folder: registration, the key, the
# fleet (real controller and worker subprocesses) serving both splits under their keys.
PROOF = """
import asyncio, json, sys
from agentrl_jax.controller.client import ControllerClient
from environments.registry import load_task, task_names
from agentrl_jax.controller.task_keys import parse_task_key, task_key
from environments.fleet import start_task_fleet

task = load_task("arithmetic", split="test")
with start_task_fleet(["arithmetic"], ["train", "test"], sandbox=False, concurrency=4,
                      log_dir=None) as fleet:
    async def served():
        async with ControllerClient(fleet.url) as client:
            return {name: len(await client.get_indices(name))
                    for name in (await client.list_workers())}
    print(json.dumps({"registered": "arithmetic" in task_names(), "name": task.name,
                      "parsed": list(parse_task_key(task.name)),
                      "file": sys.modules["environments.arithmetic"].__file__,
                      "served": asyncio.run(served())}))
"""


def test_the_guides_task_needs_only_its_folder(tmp_path):
    folder = tmp_path / "environments" / "arithmetic"
    folder.mkdir(parents=True)
    for name in ("__init__.py", "oracle.py"):
        (folder / name).write_text(guide_file(f"environments/arithmetic/{name}"))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(REPO_ROOT), str(tmp_path), *filter(None, [os.environ.get("PYTHONPATH")])])}
    env.pop("XLA_FLAGS", None)

    done = subprocess.run([sys.executable, "-c", PROOF], cwd=REPO_ROOT, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    proof = json.loads(done.stdout.strip().splitlines()[-1])
    assert proof["registered"] and proof["file"] == str(folder / "__init__.py")
    assert proof["name"] == task_key("arithmetic", "test") == "arithmetic-test"
    assert proof["parsed"] == ["arithmetic", "test"]
    assert proof["served"] == {"arithmetic-train": 100, "arithmetic-test": 100}

    # The oracle the guide writes solves every test sample through a real worker.
    result = tmp_path / "oracle.json"
    done = subprocess.run([sys.executable, "-m", "environments.oracle", "--task", "arithmetic",
                           "--split", "test", "--output", str(result)],
                          cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads(result.read_text())
    assert (summary["episodes"], summary["successes"]) == (100, 100)
    assert "arithmetic" not in task_names()   # nothing was added to this checkout
