"""One ALFWorld game in the `alfworld` package's TextWorld/PDDL engine.

The engine is textworld's `PddlEnv` (Fast Downward grounds the PDDL and applies operators) wrapped
in alfworld's `AlfredDemangler`, which turns ids such as
`apple_bar__minus_00_dot_47_bar_...` into "apple 1". That is the stack `alfworld` itself and
AgentBench's ALFWorld task use. Every `PddlEnv` loads its own copy of Fast Downward's shared
library, so games of concurrent sessions do not share planner state. The rest of the stack is
not thread-safe (textworld parses the domain and grammar with shared tatsu parsers, and
concurrent loads corrupt each other), so every engine call holds one process-wide lock, as
AgentBench's ALFWorld worker does. Calls block (loading a game grounds the whole problem, seconds
for a large kitchen), so the task runs them in threads and the event loop keeps serving.

Library copies are pooled: `fast_downward.load_lib` copies the 34 MB library to a temporary
file and dlopens it; the file is deleted but stays mapped for the life of the process, so a
copy per game leaked 34 MB of /tmp (and of memory) per episode, and a sandboxed worker's
size-capped /tmp filled after a few hundred episodes. A closed game returns its copy to the
pool and the next game reloads its own task into it, so copies number the most games open at
once.
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
import threading

import fast_downward
import textworld
from alfworld.agents.environment.alfred_tw_env import AlfredDemangler
from textworld.envs import PddlEnv

NOTHING_HAPPENS = "Nothing happens."
_ENGINE_LOCK = threading.Lock()
_FREE_LIBS: list = []  # loaded Fast Downward copies no open game uses (under _ENGINE_LOCK)


def _pddl_env(infos: textworld.EnvInfos) -> tuple[PddlEnv, object]:
    """A PddlEnv on a free library copy (a new copy only when none is free); hold the lock."""
    lib = _FREE_LIBS.pop() if _FREE_LIBS else fast_downward.load_lib()
    load_lib = fast_downward.load_lib
    fast_downward.load_lib = lambda: lib   # what PddlEnv.__init__ calls
    try:
        return PddlEnv(infos), lib
    except BaseException:
        _FREE_LIBS.append(lib)
        raise
    finally:
        fast_downward.load_lib = load_lib


def library_copies_free() -> int:
    """Loaded library copies waiting for a game (for tests and logs)."""
    return len(_FREE_LIBS)


@dataclasses.dataclass
class Observation:
    text: str
    admissible_commands: list[str]
    won: bool


class AlfworldGame:
    """A loaded game: `reset()` once, then `step(command)`."""

    def __init__(self, game_file: str | pathlib.Path, request_plan: bool = False) -> None:
        infos = textworld.EnvInfos(admissible_commands=True, won=True,
                                   policy_commands=request_plan)
        with _ENGINE_LOCK:
            pddl_env, self._lib = _pddl_env(infos)
            try:
                self._env = AlfredDemangler(pddl_env, shuffle=False)
                self._env.load(str(game_file))
            except BaseException:
                _FREE_LIBS.append(self._lib)
                raise
        self.game_file = str(game_file)
        self._state = None

    def close(self) -> None:
        """Gives the game's library copy back for the next game (idempotent)."""
        with _ENGINE_LOCK:
            if self._lib is not None:
                _FREE_LIBS.append(self._lib)
                self._lib = None

    def __enter__(self) -> AlfworldGame:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def reset(self) -> Observation:
        with _ENGINE_LOCK:
            self._state = self._env.reset()
            return self._observation()

    def step(self, command: str) -> Observation:
        """Runs `command`; one that is not admissible leaves the game as it was."""
        with _ENGINE_LOCK:
            self._state, _, _ = self._env.step(command)
            return self._observation()

    def plan(self) -> list[str]:
        """Fast Downward's plan from the current state (needs `request_plan=True`)."""
        return list(self._state["policy_commands"] or [])

    def _observation(self) -> Observation:
        return Observation(text=self._state.feedback,
                           admissible_commands=list(self._state["admissible_commands"]),
                           won=bool(self._state["won"]))


def walkthrough_of(game_file: str | pathlib.Path) -> list[str] | None:
    """The walkthrough stored in a game file (generated and official games carry one)."""
    data = json.loads(pathlib.Path(game_file).read_text())
    return data.get("walkthrough") or None
