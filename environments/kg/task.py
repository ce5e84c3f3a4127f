"""The KG task: multi-hop questions answered with seven SPARQL-backed tools (AgentBench-FC `kg`).

An episode follows AgentBench-FC's `KnowledgeGraph.sync_start_sample`:
- a system message with the instructions, the one-shot example when enabled (AgentBench shows it
  on its test split), then `<question>\\nEntities: [<names>]`;
- each round the agent makes tool calls, each answered by a tool message: an observation, or an
  error text for an unknown function, mismatched or malformed arguments, or a failing tool (the
  episode goes on, as in AgentBench);
- a turn without tool calls either holds `Final Answer: #k`, which ends the episode with reward 1
  for an exact set match and the F1 score in the metrics, or gets the user message "No valid
  function calls found! ..." and costs a round; a `#k` that names no variable ends the episode
  with `agent validation failed`;
- after `max_rounds` (15) rounds the episode ends with `task limit reached`.

Entity names from the question map to ids; `#k` names the k-th variable made so far.

Each query has a deadline (`query_deadline_s`): past it the query is stopped and the agent reads
an error observation (or, for the final answer, the episode ends `agent validation failed`).
Cancelling a session stops its running query (see `query_processes`).
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
from typing import Any

from agentrl_jax.controller.task_keys import task_key
from agentrl_jax.episode import SampleIndex, SampleStatus
from environments.kg import dataset, prompts
from environments.kg.query_processes import (
    DEFAULT_DEADLINE_S,
    DEFAULT_PROCESSES,
    QueryProcesses,
)
from environments.kg.sparql import RemoteEndpoint
from environments.kg.tools import TOOL_PARAMETERS, Schema, ToolBox, Variable
from environments.worker.blocking import SessionCalls
from environments.worker.rounds import Reply, ToolHandler, ToolRounds
from environments.worker.task import AgentTurn, EpisodeResult, Session, Task, ToolCall

log = logging.getLogger(__name__)

FINAL_ANSWER = re.compile(r"(?:Find|Final) Answer: #(\d+)")


def f1_score(predicted: set[str], gold: set[str]) -> float:
    hits = len(predicted & gold)
    if hits == 0:
        return 0.0
    precision, recall = hits / len(predicted), hits / len(gold)
    return 2 * precision * recall / (precision + recall)


class KnowledgeGraphTask(Task):
    """Serves one split of the KG questions; `sparql_url` points the tools at a remote store.

    `query_deadline_s` bounds each query; `query_processes` is how many queries on the embedded
    graph run at once in the whole worker (each in a child process, see `query_processes`).
    """

    concurrency = 32   # AgentRL's per-worker KG concurrency
    tools = prompts.TOOLS

    def __init__(self, split: str = "train", seed: int = 0, max_rounds: int = 15,
                 one_shot: bool | None = None, sparql_url: str | None = None,
                 data_file: str | None = None, concurrency: int | None = None,
                 query_deadline_s: float = DEFAULT_DEADLINE_S,
                 query_processes: int = DEFAULT_PROCESSES) -> None:
        if split not in ("train", "test"):
            raise ValueError(f"split is 'train' or 'test', not {split!r}")
        self.split = split
        self.name = task_key("kg", split)
        self.max_rounds = max_rounds
        self.one_shot = split == "test" if one_shot is None else one_shot
        if concurrency is not None:
            self.concurrency = concurrency
        if data_file:   # AgentBench-format questions, e.g. Freebase ones for a Virtuoso URL
            with open(data_file) as handle:
                self.items: list[dict] = json.load(handle)
        else:
            self.items = dataset.questions(seed)[split]
        self.backend: RemoteEndpoint | QueryProcesses = (
            RemoteEndpoint(sparql_url, timeout_s=query_deadline_s) if sparql_url
            else QueryProcesses.from_ntriples(dataset.geography_graph().to_ntriples(),
                                              processes=query_processes,
                                              deadline_s=query_deadline_s))
        self._schema: Schema | None = None

    def indices(self) -> list[SampleIndex]:
        return list(range(len(self.items)))

    async def schema(self) -> Schema:
        if self._schema is None:
            self._schema = await asyncio.to_thread(Schema.load, self.backend)
        return self._schema

    async def close(self) -> None:
        self.backend.close()

    async def episode(self, index: SampleIndex, session: Session) -> EpisodeResult:
        if not isinstance(index, int) or not 0 <= index < len(self.items):
            raise ValueError(f"{self.name} has no sample {index!r}")
        return await self.play(self.items[index], session)

    async def custom_episode(self, spec: dict[str, Any], session: Session) -> EpisodeResult:
        """An episode on a caller's item in AgentBench's format (question, entities, answer)."""
        return await self.play(spec, session)

    async def play(self, item: dict[str, Any], session: Session) -> EpisodeResult:
        queries, calls = self.backend.session(), SessionCalls("kg")
        try:
            rounds = KnowledgeGraphRounds(session, self.max_rounds, item,
                                          ToolBox(queries, await self.schema()), calls)
            session.inject({"role": "system",
                            "content": prompts.INSTRUCTIONS.format(max_round=self.max_rounds)})
            if self.one_shot:
                session.inject([dict(message) for message in prompts.ONE_SHOT])
            session.inject({"role": "user", "content": f"{item['question']}\nEntities: "
                                                       f"[{', '.join(rounds.entities)}]"})
            return await rounds.run()
        finally:
            queries.close()   # stops a query still running when the episode is cancelled
            calls.close()


class KnowledgeGraphRounds(ToolRounds):
    """One episode's rounds on one question: the SPARQL tools, their variables, the answer.

    Every mistake is answered with AgentBench-FC's error text and costs the round; a turn
    without calls is read for the final answer.
    """

    def __init__(self, session: Session, max_rounds: int, item: dict[str, Any],
                 toolbox: ToolBox, calls_of_session: SessionCalls) -> None:
        super().__init__(session, max_rounds)
        self.entities: dict[str, str] = item["entities"]
        self.gold = {answer["answer_argument"] for answer in item["answer"]}
        self.variables: list[Variable] = []
        self.toolbox, self.calls_of_session = toolbox, calls_of_session

    async def without_calls(self, turn: AgentTurn) -> Reply:
        """`Final Answer: #k` ends the episode graded on variable k; else a reminder."""
        text = turn.content.split("Observation:")[0].replace("\\_", "_")
        found = FINAL_ANSWER.findall(text)
        if not found:
            return Reply(prompts.NO_TOOL_CALL)
        number = int(found[0])
        if number >= len(self.variables):
            return Reply(ending=EpisodeResult(SampleStatus.AGENT_VALIDATION_FAILED, 0.0,
                                              {"rounds": self.round, "score": 0.0,
                                               "error": f"no variable #{number}"}))
        try:
            predicted = set(await self.calls_of_session.run(self.toolbox.final_execute,
                                                            self.variables[number]))
        except Exception as error:   # a program the store cannot run
            log.info("final answer #%d failed: %s", number, error)
            return Reply(ending=EpisodeResult(SampleStatus.AGENT_VALIDATION_FAILED, 0.0,
                                              {"rounds": self.round, "score": 0.0,
                                               "error": str(error)}))
        correct = predicted == self.gold
        return Reply(ending=EpisodeResult(
            SampleStatus.COMPLETED, float(correct),
            {"rounds": self.round, "score": f1_score(predicted, self.gold), "correct": correct,
             "answers": len(predicted)}))

    def malformed_call(self, call: ToolCall) -> Reply:
        if call.error:
            return Reply(call.error)
        try:
            json.loads(call.raw_arguments)
            reason = "the arguments must be a JSON object"
        except ValueError as error:
            reason = str(error)
        return Reply(f"Error processing tool call: {reason}")

    def unknown_tool(self, call: ToolCall) -> Reply:
        return Reply(f"Provide an invalid function name. Function {call.name} does not exist")

    def tool(self, name: str) -> ToolHandler | None:
        return self.run_tool if name in TOOL_PARAMETERS else None

    async def run_tool(self, call: ToolCall, arguments: dict[str, Any]) -> Reply:
        """The tool's observation (`##` naming the variable it made), or the error text."""
        try:
            values = [arguments[name] for name in TOOL_PARAMETERS[call.name]]
        except KeyError:
            return Reply("Arguments do not match the function signature. "
                         f"Error processing arguments for {call.name}")
        try:
            resolved = [_resolve(value, self.variables, self.entities) for value in values]
            variable, observation = await self.calls_of_session.run(
                getattr(self.toolbox, call.name), *resolved)
        except Exception as error:   # the agent's mistake, reported back as AgentBench does
            return Reply(f"Error processing tool call: {error}")
        if "##" in observation:
            observation = observation.replace("##", f"#{len(self.variables)}")
            self.variables.append(variable)
        return Reply(observation)

    def limit_reached(self) -> EpisodeResult:
        return EpisodeResult(SampleStatus.TASK_LIMIT_REACHED, 0.0,
                             {"rounds": self.max_rounds, "score": 0.0})


def _resolve(value: Any, variables: list[Variable], entities: dict[str, str]) -> Variable | str:
    if not isinstance(value, str):
        raise ValueError(f"argument {value!r} must be a string")
    if value.startswith("#"):
        try:
            return variables[int(value[1:])]
        except (ValueError, IndexError):
            raise ValueError(f"{value} is not a variable defined so far") from None
    return entities.get(value, value)
