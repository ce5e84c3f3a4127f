"""Task keys: the controller's name for one split of a task, `TASK-SPLIT`.

A worker serves one split of a task, and the controller knows it by the key `TASK-SPLIT`
(`db-test`, `os_interaction-train`; AgentRL's fleets use the same shape, `dbbench-std`).
`task_key` builds a key and `parse_task_key` takes one apart; both parts are letters, digits,
`_` and `.` (task names are folder names: `os_interaction`), never `-`, so the parse is exact.
Everything that names a split of a task (the tasks themselves, the fleet, the launchers, the
run's stages) goes through these two functions.
"""

from __future__ import annotations

import re
from typing import NamedTuple

_PART = re.compile(r"[A-Za-z0-9_.]+")


class TaskKey(NamedTuple):
    """A controller task name taken apart: `task_key(*key) == str` of it."""

    task: str
    split: str


def task_key(task: str, split: str) -> str:
    """The controller's name for `split` of `task`: `TASK-SPLIT`.

    Raises ValueError when either part is empty or holds a character other than letters,
    digits, `_` and `.` (a `-` would make the key ambiguous).
    """
    for what, part in (("task", task), ("split", split)):
        if not isinstance(part, str) or not _PART.fullmatch(part):
            raise ValueError(f"{what} name {part!r} cannot be part of a task key: use letters, "
                             "digits, '_' and '.'")
    return f"{task}-{split}"


def parse_task_key(key: str) -> TaskKey:
    """(task, split) of a key made by `task_key`; ValueError for anything else."""
    task, dash, split = key.partition("-") if isinstance(key, str) else ("", "", "")
    if not (dash and _PART.fullmatch(task) and _PART.fullmatch(split)):
        raise ValueError(f"{key!r} is not a task key TASK-SPLIT (e.g. 'db-test'; each part "
                         "letters, digits, '_' and '.')")
    return TaskKey(task, split)
