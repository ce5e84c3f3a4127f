"""Finds tasks by name and owns their controller keys, so that a new environment is one folder.

Tasks. `environments/<name>/__init__.py` sets the module attribute `TASK` to its `Task`
subclass (or any callable returning a `Task`). `load_task("echo")` imports `environments.echo`
and instantiates `TASK`; `task_names()` lists every such folder (of every `environments/`
directory on `sys.path`, see `environments/__init__.py`). Dashes in names map to underscores
(AgentRL names tasks `dbbench-std`). A name of the form `package.module:Attribute` loads a task
from outside `environments/`.

Task keys (`TASK-SPLIT`, the controller's name of a split of a task) are made and taken apart by
`agentrl_jax.controller.task_keys`.

Suites. `AGENTBENCH_FC` names the tasks of the AgentRL paper's benchmark: the default of the
configs that reproduce it. A new task folder is registered (served, trained on, evaluated when
named) without joining it.
"""

from __future__ import annotations

import importlib
import pkgutil
from typing import Any

import environments
from environments.worker.task import Task

_NOT_TASKS = {"worker", "sandbox", "registry"}

# AgentBench-FC (AgentRL paper, Table 1), by the names of our environment folders.
AGENTBENCH_FC: tuple[str, ...] = ("alfworld", "db", "kg", "os_interaction", "webshop")


def task_factory(name: str) -> Any:
    """The `Task` subclass (or factory) called `name`, imported but not instantiated."""
    if ":" in name:
        module_name, attribute = name.split(":", 1)
    else:
        module_name, attribute = f"environments.{name.replace('-', '_')}", "TASK"
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as error:
        if error.name != module_name:
            raise   # the task exists but one of its own imports is missing
        raise KeyError(f"no task {name!r}; known: {sorted(task_names())}") from None
    factory = getattr(module, attribute, None)
    if factory is None:
        raise KeyError(f"{module_name} has no attribute {attribute!r} naming its Task")
    return factory


def host_root_params(name: str) -> tuple[str, ...] | None:
    """`Task.host_root_params` of task `name` (None also for a factory that is not a class)."""
    return getattr(task_factory(name), "host_root_params", None)


def host_root_fallback_params(name: str) -> tuple[str, ...]:
    """`Task.host_root_fallback_params` of task `name` (what it runs with where no host-root
    launcher can give it `host_root_params`, if the fallback is asked for)."""
    return getattr(task_factory(name), "host_root_fallback_params", ())


def load_task(name: str, **params: Any) -> Task:
    """Instantiates the task called `name` with `params` as keyword arguments."""
    factory = task_factory(name)
    task = factory(**params)
    if not isinstance(task, Task):
        raise TypeError(f"task {name!r} made a {type(task).__name__}, not a Task")
    if not task.name:
        task.name = name.split(":")[-1] if ":" in name else name
    return task


def task_names() -> list[str]:
    """The registered tasks: the task folders under `environments/` (without importing them)."""
    return sorted({info.name for info in pkgutil.iter_modules(environments.__path__)
                   if info.ispkg and info.name not in _NOT_TASKS})
