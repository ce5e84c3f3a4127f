"""The DB task through a real worker's HTTP API: grading, invalid actions, the round limit."""

from __future__ import annotations

import pytest

from environments.db.data import load_split
from environments.db.oracle import Oracle
from environments.db.task import NO_TOOL_CALLS
from environments.oracle import play_one as play
from environments.oracle import tool_call_message as call
from environments.worker.rounds import BAD_ARGUMENTS, UNKNOWN_FUNCTION


class ScriptedAgent:
    """Answers with `script(index, history)`: the test decides every assistant message."""

    def __init__(self, script):
        self.next_message = script


class EntriesOnly:
    """What the oracle reads of a task: its entries."""

    def __init__(self, entries):
        self.entries = entries

    def entry(self, index):
        return self.entries[index]


@pytest.fixture(scope="module")
def test_entries():
    return load_split("test")


def first_index(entries, predicate):
    return next(i for i, e in enumerate(entries) if predicate(e))


def is_query(entry):
    return entry["type"][0] not in ("INSERT", "UPDATE", "DELETE")


def test_start_sample_shows_prompt_table_and_tools(db_worker, test_entries):
    record = play(db_worker, ScriptedAgent(lambda i, h: call("commit_final_answer",
                                                            {"answers": []})), 0)
    system, user = record.messages[:2]
    assert system["role"] == "system" and "MySQL database" in system["content"]
    assert user["content"].startswith("Additional table information about the question: ")
    assert user["content"].endswith("Question: " + test_entries[0]["description"] + "\n")
    assert [t["function"]["name"] for t in record.tools] == ["execute_sql", "commit_final_answer"]


def test_correct_query_answer_scores_one(db_worker, test_entries):
    index = first_index(test_entries, lambda e: is_query(e) and e.get("typed_columns"))
    entry = test_entries[index]

    def agent(i, history):
        if len(history) == 2:
            return call("execute_sql", {"query": entry["sql"]["query"]})
        return call("commit_final_answer", {"answers": entry["label"]})

    record = play(db_worker, ScriptedAgent(agent), index)
    assert (record.status, record.reward) == ("completed", 1.0)
    observation = record.messages[3]
    assert observation["role"] == "tool" and observation["tool_call_id"] == "0"
    assert observation["content"].startswith("[(")   # str(list of row tuples)
    assert record.metrics["correct"] is True


def test_wrong_answer_scores_zero(db_worker, test_entries):
    index = first_index(test_entries, is_query)
    record = play(db_worker, ScriptedAgent(
        lambda i, h: call("commit_final_answer", {"answers": ["surely not this"]})), index)
    assert (record.status, record.reward) == ("completed", 0.0)


def test_modification_graded_by_table_state(db_worker, test_entries):
    index = first_index(test_entries, lambda e: e["type"][0] == "UPDATE"
                        and e.get("typed_columns"))
    entry = test_entries[index]
    assert play(db_worker, Oracle(EntriesOnly(test_entries)), index).reward == 1.0
    # Committing without changing the table is wrong; so is a different change.
    untouched = play(db_worker, ScriptedAgent(
        lambda i, h: call("commit_final_answer", {"answers": ["done"]})), index, session_id=2)
    assert (untouched.status, untouched.reward) == ("completed", 0.0)
    table = entry["table"]["table_name"]

    def wrong_change(i, history):
        if len(history) == 2:
            return call("execute_sql", {"query": f"DELETE FROM `{table}`"})
        return call("commit_final_answer", {"answers": []})

    assert play(db_worker, ScriptedAgent(wrong_change), index, session_id=3).reward == 0.0


def test_sql_errors_and_long_results_come_back_as_text(db_worker, test_entries):
    table = test_entries[0]["table"]["table_name"]
    queries = ["SELEC nonsense", f"SELECT * FROM `{table}` AS a, `{table}` AS b",
               "SELECT 1; SELECT 2"]

    def agent(i, history):
        turn = sum(m["role"] == "assistant" for m in history)
        if turn < len(queries):
            return call("execute_sql", {"query": queries[turn]})
        return call("commit_final_answer", {"answers": []})

    record = play(db_worker, ScriptedAgent(agent), 0)
    replies = [m["content"] for m in record.messages if m["role"] == "tool"]
    assert "error" in replies[0].lower() and "syntax" in replies[0].lower()
    assert replies[1].endswith("[TRUNCATED]") and len(replies[1]) == 800 + len("[TRUNCATED]")
    assert "one statement" in replies[2]


def test_malformed_calls_get_feedback_and_the_episode_goes_on(db_worker, test_entries):
    index = first_index(test_entries, is_query)
    turns = [
        {"role": "assistant", "content": "I think the answer is 3."},           # no tool call
        call("execute_sql", "{not json"),                                      # bad arguments
        call("drop_everything", {"query": "x"}),                               # unknown tool
        call("commit_final_answer", {"answers": test_entries[index]["label"]}),
    ]
    record = play(db_worker, ScriptedAgent(
        lambda i, h: turns[sum(m["role"] == "assistant" for m in h)]), index)
    feedback = [m["content"] for m in record.messages if m["role"] in ("tool", "user")][1:]
    assert feedback == [NO_TOOL_CALLS, BAD_ARGUMENTS, UNKNOWN_FUNCTION]
    assert (record.status, record.reward) == ("completed", 1.0)


def test_round_limit_ends_with_task_limit_reached(db_worker):
    record = play(db_worker, ScriptedAgent(lambda i, h: call("execute_sql",
                                                             {"query": "SELECT 1"})), 3)
    assert record.status == "task limit reached" and record.reward == 0.0
    assert sum(m["role"] == "assistant" for m in record.messages) == 15


@pytest.mark.slow
def test_oracle_solves_every_task_of_both_splits(tmp_path):
    from environments import oracle

    for split in ("test", "train"):
        summary = oracle.main(["--task", "db", "--split", split,
                               "--output", str(tmp_path / "oracle_db.json")])
        assert summary["oracle_success"] == 1.0, summary["failures"][:5]
