"""The oracle runner: a worker subprocess, the oracle over HTTP (a worker's or a controller's),
results JSON and exports."""

from __future__ import annotations

import asyncio
import json

import httpx

from agentrl_jax.evaluation import protocol
from environments import oracle
from environments.fleet import start_task_fleet
from environments.registry import load_task


def test_runner_plays_the_db_oracle_and_writes_results(tmp_path, capsys):
    results, demos = tmp_path / "oracle_db.json", tmp_path / "demos.jsonl"
    summary = oracle.main(["--task", "db", "--split", "test", "--limit", "12",
                           "--concurrency", "4", "--output", str(results),
                           "--export", str(demos)])
    assert summary["oracle_success"] == 1.0 and summary["episodes"] == 12
    assert "db-test: oracle success 1.0000 (12/12)" in capsys.readouterr().out

    written = json.loads(results.read_text())
    assert written["oracle_success"] == 1.0 and written["failures"] == []
    assert written["by_split"]["test"]["episodes"] == 12

    lines = [json.loads(line) for line in demos.read_text().splitlines()]
    assert [line["index"] for line in lines] == list(range(12))
    first = lines[0]
    assert set(first) == {"task", "index", "messages", "tools", "reward"}
    assert first["task"] == "db-test" and first["reward"] == 1.0
    roles = [m["role"] for m in first["messages"]]
    assert roles[:3] == ["system", "user", "assistant"] and roles[-1] == "assistant"
    call = first["messages"][2]["tool_calls"][0]
    assert call["type"] == "function" and isinstance(call["function"]["arguments"], str)
    assert [t["function"]["name"] for t in first["tools"]] == ["execute_sql",
                                                               "commit_final_answer"]

    # A second split is kept beside the first; --spread plays indices spread over the split
    # (the warm start's demonstrations), not its front.
    spread = tmp_path / "spread.jsonl"
    summary = oracle.main(["--task", "db", "--split", "train", "--spread", "3",
                           "--output", str(results), "--export", str(spread)])
    both = json.loads(results.read_text())
    assert both["split"] == "train" and set(both["by_split"]) == {"train", "test"}
    played = [json.loads(line)["index"] for line in spread.read_text().splitlines()]
    assert summary["spread"] == 3 and len(played) == 3
    train = load_task("db", split="train").indices()
    assert played == protocol.demo_indices(train, 3) and played[0] != train[0]


def test_failures_are_recorded_with_reasons():
    good = oracle.EpisodeRecord(0, "completed", 1.0, [], None, {})
    wrong = oracle.EpisodeRecord(1, "completed", 0.0, [], None, {"error": "bad answer"})
    broken = oracle.EpisodeRecord(2, "unknown", 0.0, [], None, {}, error="ConnectError: x")
    summary = oracle.summarize("x", "test", [good, wrong, broken])
    assert summary["oracle_success"] == 1 / 3
    assert summary["statuses"] == {"completed": 2, "unknown": 1}
    assert [f["index"] for f in summary["failures"]] == [1, 2]
    assert "bad answer" in summary["failures"][0]["reason"]
    assert summary["failures"][1]["reason"] == "ConnectError: x"


def test_the_oracle_plays_through_a_controller(tmp_path):
    """As the trainer's rollouts do: a fleet's controller, the task's name, its sessions."""
    task = load_task("db", split="test")
    with start_task_fleet(["db"], ["test"], sandbox=False, concurrency=4,
                          log_dir=tmp_path) as fleet:
        records = asyncio.run(oracle.play_all(fleet.url, oracle.load_oracle("db", task),
                                              list(range(6)), 3, name="db-test"))
        one = oracle.play_one(fleet.url, oracle.load_oracle("db", task), 7, name="db-test")
        missing = oracle.play_one(fleet.url, oracle.load_oracle("db", task), 0, name="db-nope")
        sessions = httpx.get(fleet.url + "/list_sessions", timeout=10).json()
    assert [(r.index, r.status, r.reward) for r in records] == [
        (i, "completed", 1.0) for i in range(6)]
    assert records[0].messages[0]["role"] == "system" and records[0].tools
    assert (one.status, one.reward) == ("completed", 1.0)
    assert not missing.success and "controller answered" in missing.error
    assert len(sessions) == 7   # ended, not yet collected: every one the controller started
    assert {s["status"] for s in sessions} == {"completed"}


def test_tool_call_arguments_keep_names_as_the_context_writes_them():
    # A name the agent can only copy from its context must appear in the demonstration's call as
    # it appears there, not as a JSON escape no copy could produce.
    from agentrl_jax.sft.demos import assistant_text

    message = oracle.tool_call_message("get_relations", {"variable": "Chhindwāra"})
    raw = message["tool_calls"][0]["function"]["arguments"]
    assert raw == '{"variable": "Chhindwāra"}' and json.loads(raw) == {"variable": "Chhindwāra"}
    assert '"arguments": {"variable": "Chhindwāra"}' in assistant_text(message)
    assert "\\u" not in assistant_text(message)


def test_the_demonstrator_is_the_oracle_unless_the_task_defines_one():
    """The warm start's demonstrations play `load_demonstrator`: a task's `Demonstrator` where its
    oracle.py defines one (tic-tac-toe's uniform player), else its `Oracle`, as before."""
    from environments.kg.oracle import Oracle as KnowledgeGraphOracle
    from environments.tictactoe.oracle import Demonstrator

    assert type(oracle.load_demonstrator("kg", None)) is KnowledgeGraphOracle
    assert type(oracle.load_oracle("kg", None)) is KnowledgeGraphOracle
    assert type(oracle.load_demonstrator("tictactoe", None)) is Demonstrator
