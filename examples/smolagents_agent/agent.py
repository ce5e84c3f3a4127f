"""A smolagents `ToolCallingAgent` over the served policy, its trajectory recorded for training.

The agent gets a multiplication, a `multiply` tool and smolagents' own `final_answer`; the
script grades the final answer and sends the reward to the server
(`POST /v1/trajectories/{id}/reward`), which hands the finished trajectory to training when the
server trains (docs/serving.md, "Training on served trajectories").

Two settings make its turns trainable:
- every request carries the trajectory id (`X-Trajectory-Id`, through the client's default
  headers), so the server records the episode token for token;
- the model lets the policy choose whether to call (`tool_choice: "auto"`). smolagents forces
  a call on every turn (`"required"`), which the server serves by constrained decoding, and
  constrained turns are not recorded: the trainer recomputes unconstrained log-probabilities.

It is not trained through the task gateway as examples/openai_agent is: its `final_answer`
tool is not the environment's, and the gateway refuses a change of the task's tools.

    python examples/smolagents_agent/agent.py --base_url=http://127.0.0.1:8000/v1 \\
        --model=local --a=17 --b=23
"""

from __future__ import annotations

import argparse
import json
import sys
import uuid
from typing import Any

import httpx
import openai
import smolagents


def multiply(a: int, b: int) -> int:
    """Multiplies two integers.

    Args:
        a: The first factor.
        b: The second factor.
    """
    return a * b


class UnforcedModel(smolagents.OpenAIServerModel):
    """smolagents' OpenAI model with the call left to the policy (`tool_choice: "auto"`)."""

    def generate(self, messages, **kwargs) -> smolagents.ChatMessage:
        return super().generate(messages, tool_choice="auto", **kwargs)


def play(base_url: str, api_key: str, model: str, a: int, b: int, trajectory_id: str,
         max_steps: int = 4, max_tokens: int = 256, system_prompt: str | None = None
         ) -> dict[str, Any]:
    """Runs the agent on `a` × `b`; sends the reward (1 for the right product) and returns the
    trajectory id, the final answer and the reward. `system_prompt` replaces smolagents' own
    (~2k tokens) for small contexts."""
    llm = UnforcedModel(model_id=model, api_base=base_url, api_key=api_key,
                        max_tokens=max_tokens,
                        client_kwargs={"default_headers": {"X-Trajectory-Id": trajectory_id}})
    agent = smolagents.ToolCallingAgent(tools=[smolagents.tool(multiply)], model=llm,
                                        max_steps=max_steps, verbosity_level=0)
    if system_prompt is not None:
        agent.prompt_templates["system_prompt"] = system_prompt
    try:
        answer = agent.run(f"What is {a} times {b}? Use the tools.")
    except smolagents.AgentGenerationError as e:
        cause = e.__cause__
        if not (isinstance(cause, openai.BadRequestError)
                and cause.code == "context_length_exceeded"):
            raise
        answer = None   # the conversation outgrew the context: the episode ends unanswered
    reward = float(answer is not None and str(answer).strip() == str(a * b))
    with httpx.Client(base_url=base_url, timeout=60,
                      headers={"Authorization": f"Bearer {api_key}"}) as server:
        server.post(f"/trajectories/{trajectory_id}/reward",
                    json={"reward": reward, "task": "multiply"}).raise_for_status()
    return {"trajectory_id": trajectory_id, "answer": str(answer), "reward": reward}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base_url", required=True, help="the server, e.g. http://HOST:8000/v1")
    parser.add_argument("--api_key", default="none")
    parser.add_argument("--model", required=True, help="a served model name")
    parser.add_argument("--a", type=int, default=17)
    parser.add_argument("--b", type=int, default=23)
    args = parser.parse_args(argv)
    print(json.dumps(play(args.base_url, args.api_key, args.model, args.a, args.b,
                          f"smolagents-{uuid.uuid4().hex}")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
