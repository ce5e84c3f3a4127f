"""The oracle runner: a worker subprocess, the oracle over HTTP, results JSON and exports."""

from __future__ import annotations

import json

from agentrl_jax.evaluation import protocol
from environments import oracle
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
