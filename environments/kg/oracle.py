"""The KG oracle: replays an item's gold tool calls, then answers with the last variable.

It reads the item from the task (it is an oracle), works out from the history how many of its own
turns have been played since the question, and returns the next one as an OpenAI assistant
message. Entities are named as the question names them, as an agent would. Every turn carries a
short thought, so exported episodes read like the one-shot example and serve as SFT data.
"""

from __future__ import annotations

from environments.kg.questions import parse_action
from environments.kg.task import KnowledgeGraphTask
from environments.kg.tools import TOOL_PARAMETERS
from environments.oracle import tool_call_message


class Oracle:
    def __init__(self, task: KnowledgeGraphTask) -> None:
        self.task = task

    def next_message(self, index: int, history: list[dict]) -> dict:
        item = self.task.items[index]
        actions: list[str] = item["actions"]
        step = _turns_since_question(item, history)
        if step >= len(actions):
            made = sum(1 for action in actions if _makes_variable(action))
            answer = f"#{made - 1}"
            return {"role": "assistant",
                    "content": f"Thought: {answer} is the answer to the question.\n"
                               f"Final Answer: {answer}"}
        name, args = parse_action(actions[step])
        names = {entity: label for label, entity in item["entities"].items()}
        shown = [names.get(arg, arg) for arg in args]
        arguments = dict(zip(TOOL_PARAMETERS[name], shown, strict=True))
        return tool_call_message(name, arguments, content=_thought(name, shown))


def _turns_since_question(item: dict, history: list[dict]) -> int:
    """Assistant turns after the message that asked this item's question."""
    prefix = f"{item['question']}\nEntities:"
    start = 0
    for position, message in enumerate(history):
        content = message.get("content")
        if message.get("role") == "user" and isinstance(content, str) \
                and content.startswith(prefix):
            start = position + 1
    return sum(1 for message in history[start:] if message.get("role") == "assistant")


def _makes_variable(action: str) -> bool:
    return parse_action(action)[0] not in ("get_relations", "get_attributes")


def _thought(name: str, args: list[str]) -> str:
    if name == "get_relations":
        return f"Thought: I will look at the relations of {args[0]} to find a useful one."
    if name == "get_neighbors":
        return f"Thought: {args[1]} leads from {args[0]} to the entities I need."
    if name == "intersection":
        return f"Thought: The answer must be in both {args[0]} and {args[1]}."
    if name == "get_attributes":
        return f"Thought: I need the numerical attributes of {args[0]} to compare its members."
    if name in ("argmax", "argmin"):
        extreme = "largest" if name == "argmax" else "smallest"
        return f"Thought: The member of {args[0]} with the {extreme} {args[1]} is the answer."
    return f"Thought: The question asks how many, so I count {args[0]}."
