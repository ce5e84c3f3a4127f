"""The ALFWorld oracle: replays a winning plan, one `take_action` call per turn.

The plan is the game's walkthrough (generated games carry the planner's; official games the one
`alfworld-generate` stored). A game without one is planned by the engine's Fast Downward
planner from the initial state. Turn k of an episode plays the plan's k-th command, counting the
assistant messages already in the history, so the oracle is a pure function of (index, history).
"""

from __future__ import annotations

import functools

from environments.alfworld.engine import AlfworldGame, walkthrough_of
from environments.alfworld.task import AlfworldTask
from environments.oracle import tool_call_message


class Oracle:
    def __init__(self, task: AlfworldTask) -> None:
        self.task = task

    @functools.lru_cache(maxsize=4096)  # noqa: B019 (one oracle per run; plans are small)
    def plan(self, index: int) -> tuple[str, ...]:
        game_file = self.task.game_file(index)
        walkthrough = walkthrough_of(game_file)
        if walkthrough is None:
            with AlfworldGame(game_file, request_plan=True) as game:
                game.reset()
                walkthrough = game.plan()
        return tuple(walkthrough)

    def next_message(self, index: int, history: list[dict]) -> dict:
        step = sum(1 for message in history if message.get("role") == "assistant")
        plan = self.plan(index)
        action = plan[step] if step < len(plan) else "look"
        return tool_call_message("take_action", {"action": action})
