"""benchmarks/tpu_compile: a config whose compilation aborts libtpu's process is reported, with
the slice it was compiling and the compiler's message, and the others are not lost."""

from __future__ import annotations

import json
import pathlib
import subprocess

from benchmarks import tpu_compile


def test_a_compiler_abort_is_reported_with_its_slice_and_message(monkeypatch):
    def aborting_child(argv, **kwargs):
        out = pathlib.Path(argv[argv.index("--entry_out") + 1])
        out.write_text(json.dumps({"passed_over": {"v5p:2x2x1": "resident trainer 96.3 GiB > 95"},
                                   "compiling": "v5p:2x2x2"}))
        stderr = ("W libtpu noise\nF1206 23:39:13.028616   17579 emitter.cc:1524] Check failed: "
                  "bound == 4 (4 vs. 0)\n"
                  "*** SIGABRT received ***\n")
        return subprocess.CompletedProcess(argv, -6, stderr=stderr)

    monkeypatch.setattr(tpu_compile.subprocess, "run", aborting_child)
    result = tpu_compile.run_isolated("qwen25_14b")
    assert result["fits"] is False
    assert result["passed_over"] == {"v5p:2x2x1": "resident trainer 96.3 GiB > 95"}
    assert result["compiler_abort"]["topology"] == "v5p:2x2x2"
    assert result["compiler_abort"]["exit"] == -6
    assert "Check failed: bound == 4" in result["compiler_abort"]["message"]
    row = tpu_compile.markdown({"qwen25_14b": result}).splitlines()[-1]
    assert "v5p:2x2x2: libtpu aborted compiling (emitter.cc:1524] Check failed" in row
    assert "v5p:2x2x1: resident" in row
    assert "Check failed" in tpu_compile.flat("qwen25_14b", result)["qwen25_14b/compiler_abort"]


def test_a_finished_child_hands_its_result_back(monkeypatch):
    def child(argv, **kwargs):
        out = pathlib.Path(argv[argv.index("--entry_out") + 1])
        out.write_text(json.dumps({"result": {"config": "notebook", "fits": True}}))
        return subprocess.CompletedProcess(argv, 0, stderr="")

    monkeypatch.setattr(tpu_compile.subprocess, "run", child)
    assert tpu_compile.run_isolated("notebook") == {"config": "notebook", "fits": True}
