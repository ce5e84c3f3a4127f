"""WebShop as AgentBench-FC serves it (`webshop-std`): find and buy a product over 20 rounds.

The episode follows AgentBench's `src/server/tasks/webshop/task.py` (function-calling version):

- a system prompt, then the user message `The initial observation:\n<page>\n\nAvailable
  Actions:\n{'has_search_bar': True, 'clickables': ['search']}`;
- each round the agent calls `search_action(keywords)` or `click_action(value)`; the first call's
  first argument becomes `search[...]` / `click[...]` in the text environment, and the next round
  answers that call with the tool message `Action: <action>\n\nObservation:\n<page>\n\nAvailable
  Actions:\n<actions>`;
- no tool call: the next round's user message observes "No executable tool calls found! You
  should call a tool instead."; a call whose arguments are not a JSON object with a value: the
  user message "No valid tool call found from agent." and the page again; an unknown tool: the
  page again; arguments longer than the limit of `agent_input`: a user message saying so. None
  of these ends the episode, as in AgentBench;
- `Buy Now` ends it `completed` with WebShop's reward in [0, 1]; after 20 rounds without a
  purchase the last call is answered "Task limit reached." and the status is `task limit
  reached` with reward 0.

Extra tool calls in one message are answered "Only one action is taken per turn; this call was
ignored." (AgentBench leaves them unanswered), so every call has its tool message.
"""

from __future__ import annotations

import json
import pathlib
from typing import Any

from agentrl_jax.controller.task_keys import task_key
from agentrl_jax.episode import SampleIndex, SampleStatus
from environments.webshop import data
from environments.webshop.site import Browser, Shop
from environments.worker.agent_input import argument_error
from environments.worker.blocking import SessionCalls
from environments.worker.rounds import Rounds, answer_extra_calls
from environments.worker.task import AgentTurn, EpisodeResult, Session, Task

MAX_ROUNDS = 20
NO_TOOL_CALL = "No executable tool calls found! You should call a tool instead."
INVALID_TOOL_CALL = "No valid tool call found from agent."

SYSTEM_PROMPT = """
You are web shopping.
I will give you instructions about what to do.
You have to follow the instructions.
Every round I will give you an observation and a list of available actions,
you have to respond with calling a tool provided based on the state and instruction.
You can use search tool if search is available.
You can click one of the buttons in clickables.
If the action is not valid, perform nothing.
Keywords in search are up to you, but the value in click must be a value in the list of available actions.
Remember that your keywords in search should be carefully designed.
Your should first think about what to do, then call a tool correspondingly.
You should always use a tool, even if you have questions to confirm. You can use whatever tool is available and do not need permission from the user.
"""  # noqa: E501 (AgentBench's prompt, verbatim)

TOOLS = [
    {"type": "function", "function": {
        "name": "search_action",
        "description": "Search the shop for products matching the keywords (when a search bar "
                       "is available).",
        "parameters": {"type": "object",
                       "properties": {"keywords": {"type": "string",
                                                   "description": "the search keywords"}},
                       "required": ["keywords"]}}},
    {"type": "function", "function": {
        "name": "click_action",
        "description": "Click a button, product or option: one of the clickables of the "
                       "available actions.",
        "parameters": {"type": "object",
                       "properties": {"value": {"type": "string",
                                                "description": "a clickable, verbatim"}},
                       "required": ["value"]}}},
]


class ArgumentsRefused(ValueError):
    """The call's arguments are over the length limit; the message is for the agent."""


def action_of(call: dict[str, Any]) -> tuple[str | None, str | None]:
    """(action, call id) of an OpenAI tool call, AgentBench's way; raises when malformed.

    The first argument's value is the keyword or the clicked value, whatever its name.
    """
    function = call["function"]
    if isinstance(function["arguments"], str) and (
            refusal := argument_error(function["arguments"])):
        raise ArgumentsRefused(refusal)
    arguments = list(json.loads(function["arguments"]).values())
    call_id = call["id"]
    if function["name"] == "search_action":
        return f"search[{arguments[0]}]", call_id
    if function["name"] == "click_action":
        return f"click[{arguments[0]}]", call_id
    return None, call_id


class WebShopTask(Task):
    """The goals of one split over the generated store; sample i is goal i."""

    concurrency = 64     # AgentBench's WebShop worker concurrency
    tools = TOOLS

    def __init__(self, split: str = "train", seed: int = 0, data_path: str | None = None,
                 num_products: int = data.NUM_PRODUCTS, train_goals: int = data.TRAIN_GOALS,
                 test_goals: int = data.TEST_GOALS, max_rounds: int = MAX_ROUNDS) -> None:
        if split not in ("train", "test"):
            raise ValueError(f"split is 'train' or 'test', got {split!r}")
        self.split = split
        self.name = task_key("webshop", split)
        store = data.load_store(seed, num_products, train_goals, test_goals,
                                root=pathlib.Path(data_path) if data_path else None)
        self.goals: list[dict[str, Any]] = store["goals"][split]
        self.shop = Shop(store["products"], store["brands"])
        self.max_rounds = max_rounds

    def indices(self) -> list[SampleIndex]:
        return list(range(len(self.goals)))

    def goal(self, index: SampleIndex) -> dict[str, Any]:
        if not isinstance(index, int) or not 0 <= index < len(self.goals):
            raise ValueError(f"{self.name} has no sample {index!r}")
        return self.goals[index]

    async def episode(self, index: SampleIndex, session: Session) -> EpisodeResult:
        calls_of_session = SessionCalls("webshop")
        try:
            rounds = WebShopRounds(session, self.max_rounds, self.shop, self.goal(index),
                                   calls_of_session)
            session.inject({"role": "system", "content": SYSTEM_PROMPT})
            return await rounds.run()
        finally:
            calls_of_session.close()


class WebShopRounds(Rounds):
    """One episode's rounds in the shop, in AgentBench's order and with its reading of calls.

    Each round first shows the page the last turn led to (`before_turn`): as the reply to the
    call that acted, else as a user message. Calls are read raw, across the turn's messages, as
    AgentBench reads them (`action_of`), not through `AgentTurn.tool_calls`; only the first is
    acted on, and the others are answered `EXTRA_CALL` with the next page.
    """

    def __init__(self, session: Session, max_rounds: int, shop: Shop, goal: dict[str, Any],
                 calls_of_session: SessionCalls) -> None:
        super().__init__(session, max_rounds)
        self.goal, self.calls_of_session = goal, calls_of_session
        self.browser = Browser(shop, goal)
        self.observation = self.browser.observation
        self.action: str | None = None       # what the last turn did, if anything
        self.call_id: str | None = None      # the last call that parsed, answered next round
        self.extra_ids: list[str] = []       # the last turn's other calls, answered with it
        self.actions: list[str] = []

    def before_turn(self) -> None:
        available = self.browser.available_actions()
        if self.round == 1:
            self.session.inject({"role": "user", "content": "The initial observation:\n"
                                 f"{self.observation}\n\nAvailable Actions:\n{available}"})
        elif self.action is None:
            self.session.inject({"role": "user", "content": f"Observation:\n{self.observation}"
                                 f"\n\nAvailable Actions:\n{available}"})
        else:
            self.session.inject({"role": "tool", "tool_call_id": self.call_id, "content":
                                 f"Action: {self.action}\n\nObservation:\n{self.observation}"
                                 f"\n\nAvailable Actions:\n{available}"})
        answer_extra_calls(self.session, self.extra_ids)

    async def take_turn(self, turn: AgentTurn) -> EpisodeResult | None:
        calls = [call for message in turn.messages
                 for call in (message.get("tool_calls") or [])]
        self.action, self.extra_ids = None, []
        if not calls:
            self.observation = NO_TOOL_CALL
            return None
        try:
            self.action, self.call_id = action_of(calls[0])
        except ArgumentsRefused as error:
            self.session.inject({"role": "user", "content": str(error)})
            return None
        except Exception:   # AgentBench catches everything here
            self.session.inject({"role": "user", "content": INVALID_TOOL_CALL})
            return None
        self.extra_ids = [str(call.get("id")) for call in calls[1:] if isinstance(call, dict)]
        if self.action is None:
            return None
        self.actions.append(self.action)
        self.observation, reward, done = await self.calls_of_session.run(self.browser.step,
                                                                          self.action)
        if done:
            answer_extra_calls(self.session, self.extra_ids)
            return self.result(SampleStatus.COMPLETED, reward, self.round)
        return None

    def limit_reached(self) -> EpisodeResult:
        if self.call_id is not None:
            self.session.inject({"role": "tool", "tool_call_id": self.call_id,
                                 "content": "Task limit reached."})
        else:
            self.session.inject({"role": "user", "content": "Task limit reached."})
        answer_extra_calls(self.session, self.extra_ids)
        return self.result(SampleStatus.TASK_LIMIT_REACHED, 0.0, self.max_rounds)

    def result(self, status: SampleStatus, reward: float, rounds: int) -> EpisodeResult:
        metrics = {"rounds": rounds, "actions": len(self.actions), "won": reward == 1.0,
                   "asin": self.goal["asin"]}
        if self.browser.reward_info:
            metrics["purchase"] = self.browser.reward_info
        return EpisodeResult(status, reward, metrics)
