"""The OS task's oracle: runs the reference solution, then answers from its output.

  * check problems whose checks compare with the example's output: run the example with
    `bash_action`, then `answer_action` with that output (stripped);
  * check problems that test the machine itself (e.g. a command the agent must install): run
    the example, then `finish_action`;
  * match problems: run the example if one is given (to show the work), then `answer_action`
    with the expected answer.

The example runs as the oracle's call without its comment lines (`without_comments`). The
oracle's episodes are the warm start's demonstrations, and AgentBench's examples open with
prose such as "# Example solution script: count the relevant files": a policy that imitates
them writes sentences inside a JSON string, with quotes and backticks, and loses the call.
"""

from __future__ import annotations

from typing import Any

from environments.oracle import tool_call_message
from environments.os_interaction.task import OSTask

_OUTPUT_PREFIX = "The output of the OS:\n\n"


def output_of(message: dict[str, Any]) -> str:
    content = str(message.get("content", ""))
    return content[len(_OUTPUT_PREFIX):] if content.startswith(_OUTPUT_PREFIX) else ""


def without_comments(script: str) -> str:
    """`script` less its whole-line comments (a shebang too) and blank lines.

    The same program for bash, unless a multi-line string holds such a line. A script with a
    here-document is returned as it is, since a line that starts with `#` there is data; so is
    one that would be left empty. The slow reference sweep (tests/environments/os_interaction/
    test_os_references.py) plays every problem's oracle through its checks.
    """
    if "<<" in script:
        return script
    kept = [line for line in script.splitlines()
            if line.strip() and not line.lstrip().startswith("#")]
    return "\n".join(kept) if kept else script


class Oracle:
    def __init__(self, task: OSTask):
        self.task = task

    def next_message(self, index: int, history: list[dict[str, Any]]) -> dict[str, Any]:
        problem = self.task.problem(index)
        example = problem.example[1] if problem.example else problem.example_code
        ran = any(m.get("role") == "assistant" for m in history)
        if example and not ran:
            return tool_call_message("bash_action", {"script": without_comments(example)},
                                     "Let me run a command to work this out.")
        if problem.match is not None:
            answer = problem.match.get("answer", "")
            return tool_call_message("answer_action", {"answer": answer},
                                     f"The answer is {answer}.")
        if any(script is None for script in problem.check or ()):
            tool_replies = [m for m in history if m.get("role") == "tool"]
            answer = output_of(tool_replies[-1]).strip() if tool_replies else ""
            return tool_call_message("answer_action", {"answer": answer},
                                     f"The output gives the answer: {answer}.")
        return tool_call_message("finish_action", {"thought": "The task is done."},
                                 "The required change is in place.")
