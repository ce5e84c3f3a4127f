"""The real default (`configs/local_default.py`) on a reduced budget: its warm start must write
well-formed first tool calls, so that a regression of the format shows up in tests.

Slow (`pytest -m slow`): the demonstrations and the warm start are the default's own (cached
in the agentrl_jax cache, shared with `python -m launch.local`); RL takes 0 steps, so the final
policy is the warm start, and `eval_after` plays `PER_TASK` test indices per task with it. The
assertion is on the format of each episode's first call, never on a success rate.
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

import pytest

REPO_ROOT = pathlib.Path(__file__).resolve().parents[2]
PER_TASK = 10
WELL_FORMED = 0.9  # the bar: the right tool, well formed, in 90% of first calls


def first_call_ok(messages: list[dict], tools: list[dict], first_tools: set[str]) -> bool:
    """Whether the first assistant turn calls one of `first_tools` (the tools the oracle calls
    first on this task) with JSON arguments holding every required parameter."""
    turn = next((m for m in messages if m["role"] == "assistant"), None)
    if turn is None or not turn.get("tool_calls"):
        return False
    call = turn["tool_calls"][0]["function"]
    if call["name"] not in first_tools:
        return False
    try:
        arguments = json.loads(call["arguments"]) if isinstance(call["arguments"], str) else (
            call["arguments"])
    except json.JSONDecodeError:
        return False
    schema = next(t["function"]["parameters"] for t in tools
                  if t["function"]["name"] == call["name"])
    return isinstance(arguments, dict) and all(k in arguments
                                               for k in schema.get("required", []))


def test_first_call_ok_judges_the_format():
    tools = [{"function": {"name": "execute_sql",
                           "parameters": {"required": ["query"]}}}]
    def turn(name, arguments):
        return [{"role": "system", "content": ""}, {"role": "assistant", "content": "",
                "tool_calls": [{"function": {"name": name, "arguments": arguments}}]}]
    assert first_call_ok(turn("execute_sql", '{"query": "SELECT 1"}'), tools, {"execute_sql"})
    assert not first_call_ok(turn("execute_sql", '{"sql": "SELECT 1"}'), tools, {"execute_sql"})
    assert not first_call_ok(turn("execute_sql", '{"query": '), tools, {"execute_sql"})
    assert not first_call_ok(turn("other", "{}"), tools, {"execute_sql"})
    assert not first_call_ok([{"role": "assistant", "content": "SELECT 1"}], tools,
                             {"execute_sql"})


@pytest.mark.slow
@pytest.mark.timeout(7200)
def test_the_defaults_warm_start_writes_well_formed_first_calls(tmp_path):
    run_dir = tmp_path / "run"
    argv = [sys.executable, "-m", "launch.local", f"--config.run_dir={run_dir}",
            "--config.rl.pipeline.steps=0", "--config.eval.before_rl=False",
            f"--config.eval.per_task={PER_TASK}"]
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}   # one CPU device
    log = tmp_path / "log.txt"
    with open(log, "wb") as out:
        done = subprocess.run(argv, cwd=REPO_ROOT, env=env, stdout=out, stderr=subprocess.STDOUT,
                              timeout=7200)
    assert done.returncode == 0, log.read_text()[-4000:]

    stages = json.loads((run_dir / "stages.json").read_text())
    first_tools: dict[str, set[str]] = {}
    tools: dict[str, list[dict]] = {}
    for path in stages["demos"]["files"]:
        for line in pathlib.Path(path).read_text().splitlines():
            demo = json.loads(line)
            task = demo["task"].rsplit("-", 1)[0]
            turn = next(m for m in demo["messages"] if m["role"] == "assistant")
            first_tools.setdefault(task, set()).add(turn["tool_calls"][0]["function"]["name"])
            tools[task] = demo["tools"]
    episodes = [json.loads(x) for x in
                (run_dir / "eval_after_episodes.jsonl").read_text().splitlines()]
    rates = {}
    for task in sorted(first_tools):
        mine = [e for e in episodes if e["task"].rsplit("-", 1)[0] == task]
        assert len(mine) == PER_TASK
        rates[task] = sum(first_call_ok(e["messages"], tools[task], first_tools[task])
                          for e in mine) / len(mine)
    print("first calls well-formed with the right tool:", rates)
    assert all(rate >= WELL_FORMED for rate in rates.values()), rates
