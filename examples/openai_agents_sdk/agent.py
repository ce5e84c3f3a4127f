"""A tool-calling agent written with the OpenAI Agents SDK (`Agent`, `Runner`), trained unchanged.

The SDK runs the loop: the model answers, the SDK invokes the tools it called, and the results
go back to the model. The tools here are the controller's: invoking one sends the model's turn
to the controller (once per turn, all its calls together, as the environment takes them) and
returns that call's result. A run ends when the environment ends the episode
(`tool_use_behavior`) or when the model answers without a call; that answer is sent, and the
environment's reply starts the next run (`RunResult.to_input_list()` and the reply: the SDK's
multi-turn pattern), up to the turn limit (the episode is then cancelled). What the environment
says besides tool results after a turn with calls has no place in the SDK's loop: this agent
is for environments that answer calls with their results.

For training, two settings: every request carries the episode's trajectory id
(`X-Trajectory-Id`, through `ModelSettings.extra_headers`), so the server records the episode
token for token; and the tools are not strict (`strict_json_schema=False`): strict tools are
enforced by constrained decoding, whose turns the trainer does not take (docs/serving.md).

`python -m launch.local --config=configs/local_openai_agent.py \\
    "--config.openai_agent.command=('{python}', 'examples/openai_agents_sdk/agent.py')"` trains
the policy through it, with the episode in its environment (the variables of
examples/openai_agent/README.md); it prints one JSON line, the episode's end.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from typing import Any

import agents
import httpx
import openai


class Episode:
    """The controller's side of one episode, and the model's turn the tools must send."""

    def __init__(self, controller: httpx.AsyncClient, trajectory_id: str):
        self.controller, self.trajectory_id = controller, trajectory_id
        self.session: dict[str, str] = {}
        self.state: dict[str, Any] = {"finish": False}
        self.turn: dict[str, Any] | None = None   # the model's last turn, as a chat message
        self.results: dict[str, str] = {}         # its calls' results, by call id
        self.replies: list[dict[str, Any]] = []   # the environment's other messages
        self.turns = 0

    async def start(self, task: str, index: Any) -> dict[str, Any]:
        started = await self.controller.post("/start_sample", json={"name": task, "index": index},
                                             headers={"X-Trajectory-Id": self.trajectory_id})
        started.raise_for_status()
        self.session = {"session_id": started.headers["session_id"]}
        self.state = started.json()
        return self.state

    def sampled(self, output: list[Any]) -> None:
        """Keeps the model's turn (the SDK's output items) as the chat message it was."""
        text = "".join(part.text for item in output if item.type == "message"
                       for part in item.content if part.type == "output_text")
        calls = [{"id": item.call_id, "type": "function",
                  "function": {"name": item.name, "arguments": item.arguments}}
                 for item in output if item.type == "function_call"]
        self.turn = {"role": "assistant", "content": text or None}
        if calls:
            self.turn["tool_calls"] = calls
        self.turns += 1

    async def send_turn(self) -> None:
        """Sends the model's last turn, if not sent yet, and keeps the results of its calls."""
        if self.turn is None:
            return
        turn, self.turn = self.turn, None
        step = await self.controller.post("/interact", json={"messages": [turn]},
                                          headers=self.session)
        step.raise_for_status()
        self.state = step.json()
        replies = self.state.get("messages") or []
        self.results = {m["tool_call_id"]: str(m.get("content") or "")
                        for m in replies if m.get("role") == "tool"}
        self.replies = [m for m in replies if m.get("role") != "tool"]

    async def result_of(self, call_id: str) -> str:
        await self.send_turn()
        return self.results.get(call_id, "")

    async def cancel(self) -> None:
        if self.session and not self.state["finish"]:
            await self.controller.post("/cancel", headers=self.session)


def controller_tool(episode: Episode, spec: dict[str, Any]) -> agents.FunctionTool:
    function = spec["function"]

    async def invoke(context: agents.ToolContext, arguments: str) -> str:
        return await episode.result_of(context.tool_call_id)

    return agents.FunctionTool(
        name=function["name"], description=function.get("description", ""),
        params_json_schema=function.get("parameters") or {"type": "object", "properties": {}},
        on_invoke_tool=invoke, strict_json_schema=False)


async def play(model: agents.Model, settings: agents.ModelSettings,
               controller: httpx.AsyncClient, task: str, index: Any, trajectory_id: str,
               max_turns: int) -> dict[str, Any]:
    """Plays one episode; returns how it ended (the controller's finish, status, reward)."""
    episode = Episode(controller, trajectory_id)

    class Turns(agents.RunHooks):
        async def on_llm_end(self, context, agent, response) -> None:
            episode.sampled(response.output)

    def ended(context, results) -> agents.ToolsToFinalOutputResult:
        return agents.ToolsToFinalOutputResult(is_final_output=episode.state["finish"],
                                               final_output=episode.state.get("status"))

    try:
        state = await episode.start(task, index)
        agent = agents.Agent(name=task, model=model, model_settings=settings,
                             tools=[controller_tool(episode, t) for t in state.get("tools") or ()],
                             tool_use_behavior=ended)
        inputs = state["messages"]
        while not episode.state["finish"] and episode.turns < max_turns:
            try:
                result = await agents.Runner.run(agent, inputs, hooks=Turns(),
                                                 max_turns=max_turns - episode.turns)
            except (agents.MaxTurnsExceeded, openai.BadRequestError) as e:
                if isinstance(e, openai.BadRequestError) and e.code != "context_length_exceeded":
                    raise
                break   # the turn limit, or a full conversation
            await episode.send_turn()   # an answer without calls ends the run unsent
            inputs = result.to_input_list() + episode.replies
    finally:
        await episode.cancel()   # the turn limit, or an error: the episode ends here
    return {"trajectory_id": trajectory_id, "turns": episode.turns,
            "finish": episode.state["finish"], "status": episode.state.get("status"),
            "reward": episode.state.get("reward")}


async def main_async() -> dict[str, Any]:
    env = os.environ
    agents.set_tracing_disabled(True)   # tracing would export to api.openai.com
    trajectory_id = env["AGENTRL_TRAJECTORY_ID"]
    client = openai.AsyncOpenAI(base_url=env["OPENAI_BASE_URL"], api_key=env["OPENAI_API_KEY"],
                         max_retries=0, timeout=600)
    model = agents.OpenAIChatCompletionsModel(model=env["AGENTRL_MODEL"], openai_client=client)
    settings = agents.ModelSettings(max_tokens=int(env.get("AGENTRL_MAX_TOKENS", "512")),
                                    extra_headers={"X-Trajectory-Id": trajectory_id})
    key = env.get("AGENTRL_CONTROLLER_KEY")
    async with httpx.AsyncClient(base_url=env["AGENTRL_CONTROLLER_URL"], timeout=600,
                                 headers={"Authorization": f"Bearer {key}"} if key else {}
                                 ) as controller:
        return await play(model, settings, controller, env["AGENTRL_TASK"],
                          json.loads(env["AGENTRL_INDEX"]), trajectory_id,
                          int(env.get("AGENTRL_MAX_TURNS", "8")))


if __name__ == "__main__":
    print(json.dumps(asyncio.run(main_async())))
    sys.exit(0)
