"""The OS task through a real worker's HTTP API, on problems copied from AgentBench."""

from __future__ import annotations

import pytest
from os_task_fixtures import FIXTURES, needs_sandbox

from environments.oracle import play_one, tool_call_message
from environments.os_interaction.data import load_split
from environments.os_interaction.oracle import Oracle
from environments.os_interaction.task import NO_TOOL_CALLS, PROBLEM_PREFIX
from environments.worker.rounds import BAD_ARGUMENTS, UNKNOWN_FUNCTION

pytestmark = needs_sandbox
BACKGROUND, HIDDEN_FILES, CALC, TRAIN_0 = range(4)


class Scripted:
    """Plays `messages` in order, one per turn."""

    def __init__(self, *messages):
        self.messages = messages

    def next_message(self, index, history):
        return self.messages[sum(m["role"] == "assistant" for m in history)]


class Problems:
    def __init__(self):
        self.problems = load_split("test", FIXTURES)

    def problem(self, index):
        return self.problems[index]


def bash(script):
    return tool_call_message("bash_action", {"script": script})


def answer(text):
    return tool_call_message("answer_action", {"answer": text})


@pytest.mark.parametrize("index", [BACKGROUND, HIDDEN_FILES, CALC, TRAIN_0])
def test_reference_solution_scores_one(os_worker, index):
    record = play_one(os_worker, Oracle(Problems()), index, session_id=100 + index)
    assert (record.status, record.reward) == ("completed", 1.0), record.messages[-2:]


def test_prompt_and_tools(os_worker):
    record = play_one(os_worker, Scripted(answer("0")), HIDDEN_FILES)
    system, user = record.messages[:2]
    assert system["role"] == "system" and "bash_action" in system["content"]
    assert user["content"] == PROBLEM_PREFIX + load_split("test", FIXTURES)[1].description
    assert [t["function"]["name"] for t in record.tools] == ["bash_action", "finish_action",
                                                             "answer_action"]


def test_wrong_answers_score_zero(os_worker):
    assert play_one(os_worker, Scripted(answer("7")), HIDDEN_FILES).reward == 0.0   # it is 8
    assert play_one(os_worker, Scripted(answer("2")), BACKGROUND).reward == 0.0     # match "1"
    # An operation problem finished without doing the operation fails its check script.
    unfinished = play_one(os_worker, Scripted(tool_call_message(
        "finish_action", {"thought": "done"})), CALC)
    assert (unfinished.status, unfinished.reward) == ("completed", 0.0)


def test_shell_persists_and_output_is_truncated(os_worker):
    record = play_one(os_worker, Scripted(
        bash("cd /tmp && export GREETING=hello"),
        # The background `start` program is running: its log appears within a few seconds.
        bash("echo $GREETING from $PWD; for i in $(seq 100); do [ -s /root/log ] && break; "
             "sleep 0.1; done; ls /root/log"),
        bash("python3 -c 'print(\"x\" * 900)'"),
        bash("echo oops >&2"),
        answer("1")), BACKGROUND)
    replies = [m["content"] for m in record.messages if m["role"] == "tool"]
    assert replies[0] == "The output of the OS is empty."
    assert replies[1] == "The output of the OS:\n\nhello from /tmp\n/root/log\n"
    assert replies[2] == ("The output of the OS:\n\n" + "x" * 780
                          + "\n[truncated because the output is too long]")
    assert replies[3] == "The output of the OS:\n\noops\n"
    assert (record.status, record.reward) == ("completed", 1.0)


def test_invalid_actions_get_feedback_and_cost_a_round(os_worker):
    record = play_one(os_worker, Scripted(
        {"role": "assistant", "content": "Let me think."},
        tool_call_message("bash_action", "{broken json"),
        tool_call_message("rm_rf", {"script": "ls"}),
        answer("8")), HIDDEN_FILES)   # 6 hidden files, and . and ..
    feedback = [m["content"] for m in record.messages[2:] if m["role"] in ("user", "tool")]
    assert feedback == [NO_TOOL_CALLS, BAD_ARGUMENTS, UNKNOWN_FUNCTION]
    assert (record.status, record.reward) == ("completed", 1.0)
    assert record.metrics["rounds"] == 4


def test_round_limit_ends_with_task_limit_reached(os_worker):
    record = play_one(os_worker, Scripted(*[bash("true")] * 8), HIDDEN_FILES)
    assert (record.status, record.reward) == ("task limit reached", 0.0)
    assert sum(m["role"] == "assistant" for m in record.messages) == 8
