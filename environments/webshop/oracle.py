"""The WebShop oracle: shops like an expert who reads every product page it is shown.

1. search the instruction's keywords (the instruction without its price clause and filler);
2. on a results page, click the first product that WebShop's reward would score 1 when bought
   with the goal's options; if none, `Next >`; after the last page, search the target's title;
3. on the product page, click each goal option the product offers, then `Buy Now`.

"Would score 1" is computed with the task's own reward function and data (it is an oracle), so
an episode that reaches a product page ends with reward 1. Every decision is a function of the
goal and the pages in the history: turn k depends only on (index, history).
"""

from __future__ import annotations

import ast
import json
import re
from typing import Any

from environments.oracle import tool_call_message
from environments.webshop.reward import get_reward
from environments.webshop.task import WebShopTask

FILLER_OPENERS = re.compile(r"^(i need|i am looking for|i want to buy|find me|i'm looking for|"
                            r"i would like|get me)\s+(a |an |some )?")
FILLER_WORDS = re.compile(r"\b(that is|which is|in|with|and|color|size|scent|flavor|style)\b")


def search_keywords(instruction: str) -> str:
    """"i need a long lasting lipstick in red color, and price lower than 30.00 dollars"
    -> "long lasting lipstick red"."""
    text = instruction.split(", and price lower than")[0]
    text = FILLER_WORDS.sub(" ", FILLER_OPENERS.sub("", text))
    return " ".join(text.replace(",", " ").split())


def last_page(history: list[dict]) -> dict[str, Any] | None:
    """The available actions shown last (`{"has_search_bar", "clickables"}`), if any."""
    for message in reversed(history):
        content = message.get("content")
        if message.get("role") in ("user", "tool") and isinstance(content, str):
            marker = content.rfind("Available Actions:\n")
            if marker >= 0:
                return ast.literal_eval(content[marker + len("Available Actions:\n"):])
    return None


def agent_actions(history: list[dict]) -> list[tuple[str, str]]:
    """(tool name, first argument) of the first call of every assistant message so far."""
    actions = []
    for message in history:
        calls = message.get("tool_calls") if message.get("role") == "assistant" else None
        if not calls:
            continue
        try:   # someone else's malformed calls in the history are skipped, as the task does
            function = calls[0]["function"]
            value = next(iter(json.loads(function["arguments"]).values()))
        except (KeyError, TypeError, ValueError, AttributeError, StopIteration):
            continue
        actions.append((function["name"], str(value)))
    return actions


class Oracle:
    def __init__(self, task: WebShopTask) -> None:
        self.task = task

    def options_for(self, product: dict[str, Any], goal: dict[str, Any]) -> dict[str, str]:
        """The goal's option values the product offers, by the product's option group."""
        wanted = set(goal["goal_options"].values())
        chosen: dict[str, str] = {}
        for group, values in product["options"].items():
            for value in values:
                if value in wanted and group not in chosen:
                    chosen[group] = value
        return chosen

    def satisfies(self, asin: str, goal: dict[str, Any]) -> bool:
        product = self.task.shop.by_asin.get(asin)
        if product is None:
            return False
        reward, _ = get_reward(product, goal, product["price"], self.options_for(product, goal),
                               self.task.shop.nouns)
        return reward >= 1.0

    def next_message(self, index: int, history: list[dict]) -> dict:
        goal = self.task.goal(index)
        page = last_page(history) or {"has_search_bar": True, "clickables": ["search"]}
        clickables = page["clickables"]
        actions = agent_actions(history)
        searches = [value for name, value in actions if name == "search_action"]
        title_query = goal["name"].lower()

        if "buy now" in clickables:   # a product page: the options, then buy
            clicks = [value for name, value in actions if name == "click_action"]
            last = max(i for i, v in enumerate(clicks) if v.upper() in self.task.shop.by_asin)
            asin, done = clicks[last].upper(), set(clicks[last + 1:])
            for value in self.options_for(self.task.shop.by_asin[asin], goal).values():
                if value not in done:
                    return tool_call_message("click_action", {"value": value})
            return tool_call_message("click_action", {"value": "buy now"})

        if page["has_search_bar"] or not searches:
            keywords = search_keywords(goal["instruction_text"])
            return tool_call_message("search_action", {"keywords": keywords})

        shown = [c for c in clickables if c.upper() in self.task.shop.by_asin]
        for candidate in shown:
            if self.satisfies(candidate.upper(), goal):
                return tool_call_message("click_action", {"value": candidate})
        if searches[-1] == title_query and goal["asin"].lower() in shown:
            return tool_call_message("click_action", {"value": goal["asin"].lower()})
        if "next >" in clickables:
            return tool_call_message("click_action", {"value": "next >"})
        if title_query not in searches:
            return tool_call_message("search_action", {"keywords": title_query})
        return tool_call_message("click_action", {"value": shown[0] if shown else "back to search"})
