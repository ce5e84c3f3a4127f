"""A small task written against AgentRL's own `agentrl-worker` library (not our framework).

It is the shape of AgentRL's `simple-calculator` example: the agent must call `multiply` and
then state the product. Used by test_agentrl_worker_compat.py to check that AgentRL's worker
registers with our controller and plays an episode through our client.
"""

import json

from agentrl.worker.task import Session, Task
from agentrl.worker.typings import RewardHistoryItem, SampleStatus, TaskSampleExecutionResult

MULTIPLY = {
    "type": "function",
    "function": {
        "name": "multiply",
        "description": "Multiplies two integers.",
        "parameters": {"type": "object",
                       "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                       "required": ["a", "b"]},
    },
}


class CalculatorTask(Task):
    def __init__(self, concurrency: int = 4, **kwargs):
        super().__init__(name="calculator", concurrency=concurrency, tools=[MULTIPLY],
                         full_async=True, **kwargs)

    def get_indices(self):
        return list(range(5))

    async def start_sample(self, index, session: Session) -> TaskSampleExecutionResult:
        a, b = index + 2, 7
        session.inject({"role": "user", "content": f"What is {a} times {b}?"})
        turn = await session.action()
        call = (turn.messages[-1].get("tool_calls") or [None])[0]
        if call is None or call["function"]["name"] != "multiply":
            return TaskSampleExecutionResult(status=SampleStatus.AGENT_INVALID_ACTION)
        args = json.loads(call["function"]["arguments"])
        session.inject({"role": "tool", "tool_call_id": call["id"],
                        "content": str(args["a"] * args["b"])})
        turn = await session.action()
        correct = str(turn.messages[-1].get("content", "")).strip() == str(a * b)
        session.inject(RewardHistoryItem(reward=1.0 if correct else 0.0, score=float(correct)))
        return TaskSampleExecutionResult(status=SampleStatus.COMPLETED,
                                         result={"correct": correct})
