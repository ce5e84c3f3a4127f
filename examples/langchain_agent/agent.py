"""A tool-calling agent written with LangChain (`ChatOpenAI.bind_tools`), trained unchanged.

It plays one episode of a task served by an AgentRL-compatible controller: the controller
gives the episode's messages and tools, the model answers through `ChatOpenAI` with the tools
bound, each answer goes to the controller as an OpenAI message, and the controller's replies
(tool results) join the conversation, until the controller ends the episode or the turn limit
is reached (then the episode is cancelled). The one thing it adds for training is a header:
every request to the model carries the episode's trajectory id (`X-Trajectory-Id`), so the
server records the episode token for token.

`python -m launch.local --config=configs/local_openai_agent.py \\
    "--config.openai_agent.command=('{python}', 'examples/langchain_agent/agent.py')"` trains the
policy through it, with the episode in its environment (the variables of
examples/openai_agent/README.md); it prints one JSON line, the episode's end.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

import httpx
import openai
from langchain_core.messages import convert_to_messages, convert_to_openai_messages
from langchain_openai import ChatOpenAI


def play(chat: ChatOpenAI, controller: httpx.Client, task: str, index: Any,
         trajectory_id: str, max_turns: int) -> dict[str, Any]:
    """Plays one episode; returns how it ended (the controller's finish, status, reward)."""
    started = controller.post("/start_sample", json={"name": task, "index": index},
                              headers={"X-Trajectory-Id": trajectory_id})
    started.raise_for_status()
    session = {"session_id": started.headers["session_id"]}
    state = started.json()
    agent = chat.bind_tools(state.get("tools") or [])
    messages = convert_to_messages(state["messages"])
    turns = 0
    try:
        while not state["finish"] and turns < max_turns:
            try:
                answer = agent.invoke(messages)
            except openai.BadRequestError as e:
                if e.code == "context_length_exceeded":   # the conversation is full: stop
                    break
                raise
            turns += 1
            messages.append(answer)
            step = controller.post("/interact", headers=session,
                                   json={"messages": [convert_to_openai_messages(answer)]})
            step.raise_for_status()
            state = step.json()
            if not state["finish"]:
                messages += convert_to_messages(state["messages"])
    finally:
        if not state["finish"]:   # the turn limit, or an error: the episode ends here
            controller.post("/cancel", headers=session)
    return {"trajectory_id": trajectory_id, "turns": turns, "finish": state["finish"],
            "status": state.get("status"), "reward": state.get("reward")}


def main() -> int:
    env = os.environ
    trajectory_id = env["AGENTRL_TRAJECTORY_ID"]
    chat = ChatOpenAI(model=env["AGENTRL_MODEL"], base_url=env["OPENAI_BASE_URL"],
                      api_key=env["OPENAI_API_KEY"], max_retries=0, timeout=600,
                      max_tokens=int(env.get("AGENTRL_MAX_TOKENS", "512")),
                      default_headers={"X-Trajectory-Id": trajectory_id})
    key = env.get("AGENTRL_CONTROLLER_KEY")
    with httpx.Client(base_url=env["AGENTRL_CONTROLLER_URL"], timeout=600,
                      headers={"Authorization": f"Bearer {key}"} if key else {}) as controller:
        ended = play(chat, controller, env["AGENTRL_TASK"], json.loads(env["AGENTRL_INDEX"]),
                     trajectory_id, int(env.get("AGENTRL_MAX_TURNS", "8")))
    print(json.dumps(ended))
    return 0


if __name__ == "__main__":
    sys.exit(main())
