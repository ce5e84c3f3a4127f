"""notebooks/agentrl_demo.ipynb runs end to end (nbclient, fast mode) and shows what it says.

The notebook is executed in a fresh kernel from its own folder, as a user would, with
`AGENTRL_NOTEBOOK_FAST=1` (the main job's `:fast` config) and its run directory in tmp_path;
its RL run is the fast game stage, under RUN_DIR/tictactoe. That takes several minutes (twelve
sandboxed workers, the game stage's every step), so it is a slow test:
`pytest -m slow tests/notebooks`. The check that the notebook is well-formed and Colab-ready
runs by default.
"""

from __future__ import annotations

import os
import pathlib

import nbformat
import pytest
from nbclient import NotebookClient

from environments.registry import AGENTBENCH_FC

REPO_ROOT = pathlib.Path(__file__).resolve().parents[2]
NOTEBOOK = REPO_ROOT / "notebooks" / "agentrl_demo.ipynb"
TASKS = AGENTBENCH_FC   # the default config's tasks; the game's episode may end in a draw


def outputs_of(cell) -> str:
    text = []
    for output in cell.get("outputs", []):
        if output.get("output_type") == "stream":
            text.append(output["text"])
        elif "data" in output:
            text.append(str(output["data"].get("text/plain", "")))
            text.append(str(output["data"].get("text/markdown", "")))
    return "".join(text)


@pytest.fixture(scope="module")
def executed(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("notebook") / "run"
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    env = {**os.environ, "AGENTRL_NOTEBOOK_FAST": "1", "AGENTRL_NOTEBOOK_RUN_DIR": str(run_dir)}
    env.pop("XLA_FLAGS", None)   # the kernel sees this machine's devices, as a user's would
    client = NotebookClient(notebook, timeout=1800, kernel_name="python3",
                            resources={"metadata": {"path": str(NOTEBOOK.parent)}})
    client.execute(env=env)
    return notebook, run_dir


def test_notebook_is_colab_ready():
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    nbformat.validate(notebook)
    setup = notebook.cells[1].source
    assert "'google.colab' in sys.modules" in setup.replace('"', "'")
    assert "pip" in setup and '"-e"' in setup
    # Stored without outputs: what Colab opens is the clean walk-through.
    assert all(not cell.get("outputs") for cell in notebook.cells if cell.cell_type == "code")


@pytest.mark.slow
def test_notebook_executes_every_stage(executed):
    notebook, run_dir = executed
    text = "\n".join(outputs_of(cell) for cell in notebook.cells if cell.cell_type == "code")
    assert "fast mode: True" in text
    for task in TASKS:   # one oracle episode each, solved
        assert f"{task}: completed, reward 1.00" in text
    assert "tictactoe: completed, reward" in text
    assert "| task |" in text   # the results table was displayed
    images = [o for cell in notebook.cells for o in cell.get("outputs", [])
              if "image/png" in o.get("data", {})]
    assert len(images) == 1
    for name in ("success.png", "results.md", "eval_before.json", "eval_after.json"):
        assert (run_dir / "tictactoe" / name).is_file(), name
    assert "stages: demos, sft, eval_before, rl, eval_after, report" in text
