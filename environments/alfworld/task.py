"""ALFWorld as AgentBench-FC serves it: one `take_action(action)` tool over a household game.

The episode (AgentBench `alfworld/task.py`, function-calling version):
- a system prompt, then `Here is your task. <observation> AVAILABLE ACTIONS: <one per line>`;
- each `take_action` call runs the command in the engine and is answered by a tool message
  `<observation> AVAILABLE ACTIONS: ...`; a command that is not admissible changes nothing and
  reads "Nothing happens.";
- winning ends the episode `completed` with reward 1; the same action three times in a row ends
  it `agent invalid action`; a turn without a usable `take_action` call ends it
  `agent validation failed`; after 20 actions it is `task limit reached`. Reward 0 unless won.
"""

from __future__ import annotations

import asyncio
import pathlib
from typing import Any

from agentrl_jax.controller.task_keys import task_key
from agentrl_jax.episode import SampleIndex, SampleStatus
from environments.alfworld import games
from environments.alfworld.engine import AlfworldGame, Observation
from environments.worker.rounds import Reply, ToolHandler, ToolRounds
from environments.worker.task import AgentTurn, EpisodeResult, Session, Task, ToolCall

MAX_STEPS = 20
MAX_REPEATS = 3
NO_CALL = ("No executable tool calls found. Please call take_action with one of the available "
           "actions.")
INVALID_CALL = "Invalid call: use take_action with a string argument 'action'."

TAKE_ACTION_TOOL = {
    "type": "function",
    "function": {
        "name": "take_action",
        "description": "Take one action in the household, chosen from the available actions.",
        "parameters": {
            "type": "object",
            "properties": {"action": {"type": "string",
                                      "description": "one of the AVAILABLE ACTIONS, verbatim"}},
            "required": ["action"],
        },
    },
}

SYSTEM_PROMPT = (
    "Interact with a household to solve a task. Imagine you are an intelligent agent in a "
    "household environment and your target is to perform actions to complete the task goal. At "
    "the beginning of your interactions, you will be given the detailed description of the "
    "current environment and your goal to accomplish. For each of your turn, you will be given "
    "a list of actions which you can choose one to perform in this turn, by calling the "
    "take_action tool with it. After each turn, the environment will give you immediate "
    "feedback based on which you plan your next few steps. If the environment outputs "
    "\"Nothing happens.\", the previous action was invalid and you should try other options.\n"
    "Reminder:\n1. The action must be chosen from the given available actions. Any other action "
    "is regarded as illegal.\n2. Think when necessary, try to act directly more in the process."
)


def available_actions(commands: list[str]) -> str:
    return " AVAILABLE ACTIONS: " + "\n".join(commands) + "\n"


def strip_intro(text: str) -> str:
    """Drops the "-= Welcome to TextWorld, ALFRED! =-" banner, as AgentBench does."""
    return "\n".join(text.split("\n\n")[1:])


def strip_arrival(text: str) -> str:
    """AgentBench's `process_ob`: "You arrive at loc 12. On the ..." -> "On the ..."."""
    if text.startswith("You arrive at loc "):
        text = text[text.find(". ") + 2:]
    return text


class AlfworldTask(Task):
    """ALFWorld games of one split; sample i is the i-th game file in sorted path order."""

    concurrency = 16     # AgentBench's ALFWorld worker concurrency
    tools = [TAKE_ACTION_TOOL]

    def __init__(self, split: str = "train", data_path: str | None = None, seed: int = 0,
                 max_steps: int = MAX_STEPS) -> None:
        if split not in ("train", "test"):
            raise ValueError(f"split is 'train' or 'test', got {split!r}")
        self.split = split
        self.name = task_key("alfworld", split)
        self.root = games.data_root(data_path, seed)
        self.game_files = games.list_games(self.root, split)
        if not self.game_files:
            raise FileNotFoundError(f"no ALFWorld games of split {split!r} under {self.root}")
        self.max_steps = max_steps

    def indices(self) -> list[SampleIndex]:
        return list(range(len(self.game_files)))

    def game_file(self, index: SampleIndex) -> pathlib.Path:
        if not isinstance(index, int) or not 0 <= index < len(self.game_files):
            raise ValueError(f"{self.name} has no sample {index!r}")
        return self.game_files[index]

    def first_message(self, observation: Observation) -> str:
        return ("Here is your task. " + strip_intro(observation.text)
                + available_actions(observation.admissible_commands))

    async def episode(self, index: SampleIndex, session: Session) -> EpisodeResult:
        game_file = self.game_file(index)
        game = await asyncio.to_thread(AlfworldGame, game_file)
        try:
            return await self._play(game, game_file, session)
        finally:
            game.close()

    async def _play(self, game: AlfworldGame, game_file: pathlib.Path,
                    session: Session) -> EpisodeResult:
        observation = await asyncio.to_thread(game.reset)
        session.inject({"role": "system", "content": SYSTEM_PROMPT})
        session.inject({"role": "user", "content": self.first_message(observation)})
        metrics: dict[str, Any] = {"game": str(game_file.relative_to(self.root))}
        return await AlfworldRounds(session, self.max_steps, game, metrics).run()


class AlfworldRounds(ToolRounds):
    """One episode's steps in the household: `take_action`, the win, the repeats.

    One call per turn is acted on. A turn without calls, or whose first call is not
    `take_action` with a string `action`, ends the episode `agent validation failed`.
    """

    one_call_per_turn = True

    def __init__(self, session: Session, max_steps: int, game: AlfworldGame,
                 metrics: dict[str, Any]) -> None:
        super().__init__(session, max_steps)
        self.game, self.metrics = game, metrics
        self.actions: list[str] = []

    def tool(self, name: str) -> ToolHandler | None:
        return self.take_action if name == "take_action" else None

    async def without_calls(self, turn: AgentTurn) -> Reply:
        return self.refusal(NO_CALL)

    def malformed_call(self, call: ToolCall) -> Reply:
        return self.refusal(call.error or INVALID_CALL)

    def unknown_tool(self, call: ToolCall) -> Reply:
        return self.refusal(INVALID_CALL)

    async def take_action(self, call: ToolCall, arguments: dict[str, Any]) -> Reply:
        action = arguments.get("action")
        if not isinstance(action, str):
            return self.refusal(INVALID_CALL)
        self.actions.append(action.strip())
        observation = await asyncio.to_thread(self.game.step, action.strip())
        reply = strip_arrival(observation.text) + available_actions(
            observation.admissible_commands)
        if observation.won:
            return Reply(reply, self.result(SampleStatus.COMPLETED, 1.0))
        if len(self.actions) >= MAX_REPEATS and len(set(self.actions[-MAX_REPEATS:])) == 1:
            return Reply(reply, self.result(SampleStatus.AGENT_INVALID_ACTION))
        return Reply(reply)

    def refusal(self, text: str) -> Reply:
        """`text`, and the end of the episode: the agent's turn could not be acted on."""
        return Reply(text, self.result(SampleStatus.AGENT_VALIDATION_FAILED))

    def limit_reached(self) -> EpisodeResult:
        return self.result(SampleStatus.TASK_LIMIT_REACHED)

    def result(self, status: SampleStatus, reward: float = 0.0) -> EpisodeResult:
        return EpisodeResult(status, reward, {**self.metrics, "steps": len(self.actions),
                                              "won": reward == 1.0})
