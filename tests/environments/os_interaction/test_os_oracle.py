"""The OS oracle's first call: the reference solution as bash runs it, without its prose."""

from __future__ import annotations

import json

import pytest

from environments.os_interaction.data import Problem
from environments.os_interaction.oracle import Oracle, without_comments


@pytest.mark.parametrize("script, expected", [
    ("# Example solution script: count the files\nfind ~ -type f | wc -l",
     "find ~ -type f | wc -l"),
    ("#!/bin/bash\n\n# Loop over the logs\nfor f in *.log; do\n  # count\n  wc -l $f\ndone\n",
     "for f in *.log; do\n  wc -l $f\ndone"),
    ("grep -c '#' notes.txt  # a trailing comment", "grep -c '#' notes.txt  # a trailing comment"),
])
def test_whole_line_comments_and_blank_lines_go(script, expected):
    assert without_comments(script) == expected


@pytest.mark.parametrize("script", [
    "cat > notes.md <<EOF\n# a heading, which is data\nEOF\nwc -l notes.md",
    "# only a comment",
])
def test_a_here_document_or_a_script_of_comments_stays_as_it_is(script):
    """A line starting with `#` in a here-document is data; an empty call would run nothing."""
    assert without_comments(script) == script


class _OneProblem:
    def __init__(self, problem: Problem):
        self._problem = problem

    def problem(self, index: int) -> Problem:
        return self._problem


def test_the_oracle_runs_the_example_without_its_comments():
    problem = Problem(source="train-00001", description="How many files?", image="default",
                      init=(), start=None, match=None, check=(None,),
                      example=("bash", "# Count them.\nls ~ | wc -l\n"), example_code=None)
    call = Oracle(_OneProblem(problem)).next_message(1, [])["tool_calls"][0]["function"]
    assert call["name"] == "bash_action"
    assert json.loads(call["arguments"]) == {"script": "ls ~ | wc -l"}
