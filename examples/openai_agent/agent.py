"""A function-calling agent written against the `openai` client alone (and httpx for the tasks).

It plays one episode of a task served by an AgentRL-compatible controller: it asks the
controller for the task's messages and tools, lets the model answer with
`chat.completions.create(tools=...)`, sends each answer (its tool calls) to the controller, adds
the controller's replies (tool results) to the conversation, and goes on until the controller
ends the episode or the turn limit is reached (then it cancels the episode). Nothing in it is
specific to agentrl_jax except one request field: every chat request carries the episode's
trajectory id (`extra_body={"trajectory_id": ...}`), which lets the server record the episode
token for token for training.

Run it by hand against a served policy and a controller:

    OPENAI_BASE_URL=http://127.0.0.1:8000/v1 OPENAI_API_KEY=KEY \\
    python examples/openai_agent/agent.py --controller_url=http://127.0.0.1:5020/api \\
        --task=db-test --index=3 --model=local

`python -m launch.local --config=configs/local_openai_agent.py` trains the policy through it: it
runs this file once per episode with the episode in its environment (OPENAI_BASE_URL,
OPENAI_API_KEY, AGENTRL_MODEL, AGENTRL_CONTROLLER_URL, AGENTRL_CONTROLLER_KEY, AGENTRL_TASK,
AGENTRL_INDEX, AGENTRL_TRAJECTORY_ID, AGENTRL_MAX_TURNS, AGENTRL_MAX_TOKENS; each flag below
defaults to its variable). There the controller URL is the trainer's task gateway, which checks
that what the agent sends is what the model sampled and takes the reward from the environment,
never from this program. It prints one JSON line: the episode's end as the controller reported it.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import uuid
from typing import Any

import httpx
import openai


def play(llm: openai.OpenAI, controller: httpx.Client, *, model: str, task: str, index: Any,
         trajectory_id: str, max_turns: int, max_tokens: int,
         temperature: float | None = None) -> dict[str, Any]:
    """Plays one episode of `task` sample `index`; returns how it ended (the controller's
    finish, status and reward, and the turns played). Raises on transport and server errors,
    after cancelling the episode."""
    started = controller.post("/start_sample", json={"name": task, "index": index},
                              headers={"X-Trajectory-Id": trajectory_id})
    started.raise_for_status()
    session = {"session_id": started.headers["session_id"]}
    state = started.json()
    messages: list[dict[str, Any]] = list(state["messages"])
    tools = state.get("tools") or None
    turns = 0
    try:
        while not state["finish"] and turns < max_turns:
            try:
                response = llm.chat.completions.create(
                    model=model, messages=messages, tools=tools, max_tokens=max_tokens,
                    temperature=temperature, extra_body={"trajectory_id": trajectory_id})
            except openai.BadRequestError as e:
                if e.code == "context_length_exceeded":  # the conversation is full: stop
                    break
                raise
            turns += 1
            answer = response.choices[0].message.model_dump(exclude_none=True)
            messages.append(answer)
            step = controller.post("/interact", json={"messages": [answer]}, headers=session)
            step.raise_for_status()
            state = step.json()
            if not state["finish"]:
                messages += state["messages"]
    finally:
        if not state["finish"]:  # our limit, or an error: the episode ends here
            controller.post("/cancel", headers=session)
    return {"trajectory_id": trajectory_id, "turns": turns, "finish": state["finish"],
            "status": state.get("status"), "reward": state.get("reward")}


def main(argv: list[str] | None = None) -> int:
    env = os.environ.get
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--controller_url", default=env("AGENTRL_CONTROLLER_URL"))
    parser.add_argument("--controller_key", default=env("AGENTRL_CONTROLLER_KEY"),
                        help="sent as Authorization: Bearer KEY to the controller, if set")
    parser.add_argument("--task", default=env("AGENTRL_TASK"))
    parser.add_argument("--index", default=env("AGENTRL_INDEX"), help="JSON (3, or \"id\")")
    parser.add_argument("--model", default=env("AGENTRL_MODEL"))
    parser.add_argument("--trajectory_id", default=env("AGENTRL_TRAJECTORY_ID"))
    parser.add_argument("--max_turns", type=int, default=int(env("AGENTRL_MAX_TURNS", "8")))
    parser.add_argument("--max_tokens", type=int, default=int(env("AGENTRL_MAX_TOKENS", "512")))
    parser.add_argument("--temperature", type=float, default=None)
    args = parser.parse_args(argv)
    missing = [k for k in ("controller_url", "task", "index", "model") if not getattr(args, k)]
    if missing:
        parser.error("missing: " + ", ".join(f"--{k}" for k in missing))
    headers = {"Authorization": f"Bearer {args.controller_key}"} if args.controller_key else {}
    llm = openai.OpenAI(max_retries=0, timeout=600)  # OPENAI_BASE_URL, OPENAI_API_KEY
    with httpx.Client(base_url=args.controller_url, headers=headers, timeout=600) as controller:
        ended = play(llm, controller, model=args.model, task=args.task,
                     index=json.loads(args.index),
                     trajectory_id=args.trajectory_id or f"episode-{uuid.uuid4().hex}",
                     max_turns=args.max_turns, max_tokens=args.max_tokens,
                     temperature=args.temperature)
    print(json.dumps(ended))
    return 0


if __name__ == "__main__":
    sys.exit(main())
