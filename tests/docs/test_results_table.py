"""README.md's table of current results is generated from benchmarks/results/*.json by
docs/make_results_table.py; it must not drift from the JSON, and a figure the script cannot find
must stop it, not leave a blank."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO_ROOT / "docs"))

import make_results_table  # noqa: E402


def test_readme_results_table_is_what_the_json_gives():
    done = subprocess.run([sys.executable, "docs/make_results_table.py", "--check"],
                          cwd=REPO_ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


def test_every_row_names_its_json_and_host():
    table = make_results_table.render()
    rows = [line for line in table.splitlines() if line.startswith("| ") and "---" not in line]
    assert len(rows) == len(make_results_table.ROWS) + 1  # and the header
    for row, line in zip(make_results_table.ROWS, rows[1:], strict=True):
        assert f"benchmarks/results/{row.source}.json" in line
        assert line.rstrip(" |").split("| ")[-1].strip(), line  # a host


def test_a_missing_key_fails_loudly(tmp_path: Path):
    for path in (REPO_ROOT / "benchmarks" / "results").glob("*.json"):
        shutil.copy(path, tmp_path)
    make_results_table.render(tmp_path)  # the copies render
    train_step = json.loads((tmp_path / "train_step.json").read_text())
    del train_step["mfu_vs_matmul_peak"]
    (tmp_path / "train_step.json").write_text(json.dumps(train_step))
    with pytest.raises(make_results_table.MissingFigure, match="train_step.json.*mfu_vs_matmul"):
        make_results_table.render(tmp_path)


def test_a_json_without_its_machine_fails_loudly(tmp_path: Path):
    (tmp_path / "x.json").write_text(json.dumps({"ratio": 2.0}))
    figures = make_results_table.Figures(tmp_path, "x")
    with pytest.raises(make_results_table.MissingFigure, match="records no machine"):
        figures.host()


def test_the_table_replaces_only_what_is_between_the_markers():
    begin, end = make_results_table.BEGIN, make_results_table.END
    readme = f"head\n{begin}\nold\n{end}\ntail\n"
    assert make_results_table.replace_table(readme, f"{begin}\nnew\n{end}") == (
        f"head\n{begin}\nnew\n{end}\ntail\n")
    with pytest.raises(SystemExit):
        make_results_table.replace_table("no markers", "table")
