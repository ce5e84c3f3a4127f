"""The agent frameworks people write agents in, unchanged, against our server: the OpenAI
Agents SDK (its default Responses model and its chat-completions model, strict tools by
default), LangChain's `ChatOpenAI` with bound tools, and smolagents' `ToolCallingAgent` (every
call with tool_choice "required"). Each runs a tiny model with one function tool to its end.

tiny-agent opens a call of get_weather on every turn; the grammar keeps it well formed (the
city is one of an enum, so a call always ends). The agents end after the tool's result (the
Agents SDK's `stop_on_first_tool`), or at their step limit. Greedy sampling: deterministic.
"""

import asyncio
from typing import Literal

import pytest

pytest.importorskip("agents")   # the `frameworks` extra (scripts/setup.sh installs it)

ASK = "What is the weather in Paris?"
CALLS: list[str] = []


def get_weather(city: Literal["Paris", "Rome", "Oslo"]) -> str:
    """Current weather of a city.

    Args:
        city: City name.
    """
    CALLS.append(city)
    return f"sunny in {city}"


@pytest.fixture(autouse=True)
def no_calls_yet():
    CALLS.clear()


@pytest.mark.parametrize("model_class", ["OpenAIResponsesModel", "OpenAIChatCompletionsModel"])
def test_openai_agents_sdk_runs_a_strict_tool(server, model_class):
    import agents
    from openai import AsyncOpenAI

    agents.set_tracing_disabled(True)   # tracing would export to api.openai.com
    client = AsyncOpenAI(base_url=f"{server.url}/v1", api_key="none")
    tool = agents.function_tool(get_weather)   # strict JSON schema, as by default
    agent = agents.Agent(
        name="weather", instructions="Answer with the tool.", tools=[tool],
        model=getattr(agents, model_class)(model="tiny-agent", openai_client=client),
        model_settings=agents.ModelSettings(temperature=0.0),
        tool_use_behavior="stop_on_first_tool")
    result = asyncio.run(agents.Runner.run(agent, ASK, max_turns=2))
    assert len(CALLS) == 1 and result.final_output == f"sunny in {CALLS[0]}"


def test_langchain_chat_openai_with_bound_tools(server):
    from langchain_core.messages import HumanMessage, ToolMessage
    from langchain_core.tools import tool
    from langchain_openai import ChatOpenAI

    weather = tool(get_weather)
    chat = ChatOpenAI(model="tiny-agent", base_url=f"{server.url}/v1", api_key="none",
                      temperature=0, max_tokens=64).bind_tools([weather], tool_choice="required")
    messages = [HumanMessage(ASK)]
    answer = chat.invoke(messages)
    (call,) = answer.tool_calls
    assert call["name"] == "get_weather" and call["args"]["city"] in ("Paris", "Rome", "Oslo")
    messages += [answer, ToolMessage(weather.invoke(call["args"]), tool_call_id=call["id"])]
    streamed = list(chat.stream(messages))   # the next turn, streamed
    assert sum(streamed[1:], streamed[0]).tool_calls[0]["name"] == "get_weather"


def test_smolagents_tool_calling_agent(server):
    import smolagents

    weather = smolagents.tool(get_weather)
    model = smolagents.OpenAIServerModel(model_id="tiny-agent", api_base=f"{server.url}/v1",
                                         api_key="none", max_tokens=64, temperature=0)
    agent = smolagents.ToolCallingAgent(tools=[weather], model=model, max_steps=2,
                                        verbosity_level=0)
    # Its default system prompt (~2.5k tokens here) is longer than the test engine's context.
    agent.prompt_templates["system_prompt"] = "Answer with the tools."
    agent.run(ASK)
    steps = [s for s in agent.memory.steps if isinstance(s, smolagents.ActionStep)]
    assert CALLS and set(CALLS) <= {"Paris", "Rome", "Oslo"}
    assert all(s.error is None for s in steps if s.tool_calls)


def test_the_smolagents_example_records_its_trajectory(server):
    from examples.smolagents_agent.agent import play

    ended = play(f"{server.url}/v1", "none", "tiny-agent", 17, 23, "smolagents-1", max_steps=2,
                 max_tokens=64, system_prompt="Answer with the tools.")
    rollouts = [r for r in server.service.trajectories.pop_finished()
                if r.metrics["trajectory_id"] == "smolagents-1"]
    assert rollouts and all(r.reward == ended["reward"] == 0.0 for r in rollouts)
    # tiny-agent calls a tool smolagents does not have; the next call outgrows the 512-token
    # context and ends the episode, unanswered; the turns sampled are recorded.
    assert sum(r.num_turns for r in rollouts) >= 1
