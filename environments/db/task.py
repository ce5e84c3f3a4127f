"""The DB task (AgentBench-FC dbbench): answer questions about a table, or modify it, with SQL.

Episode: a system prompt and a user message (evidence, table information, question), then up to
`max_rounds` agent turns. Each turn's tool calls run in order:

    execute_sql(query)            one statement on the session's own database; the reply is the
                                  rows as str(list of tuples) or the error text, cut at 800 chars
    commit_final_answer(answers)  ends the episode (`completed`) with reward 1 or 0

As in AgentBench, mistakes cost a round but do not end the episode: a turn without tool calls
gets a user message saying so, a call whose arguments are not JSON or that names an unknown
function gets an error tool message. Running out of rounds ends it with `task limit reached`.
Grading follows AgentBench (`grading.py`): query answers by normalised match with the label,
modifications by the table hash against `answer_md5` or, for generated tasks, against the hash
of a fresh database after the gold SQL.
"""

from __future__ import annotations

from typing import Any

from agentrl_jax.controller.task_keys import task_key
from agentrl_jax.episode import SampleIndex, SampleStatus
from environments.db.backends import STATEMENT_TIMEOUT_S, Database, open_database
from environments.db.data import DEFAULT_DATA_DIR, load_split
from environments.db.grading import answers_match, is_modification, md5_from_result
from environments.db.sqlite_guard import DEFAULT_MEMORY_LIMIT_BYTES
from environments.worker.rounds import Reply, ToolHandler, ToolRounds
from environments.worker.task import AgentTurn, EpisodeResult, Session, Task, ToolCall

SYSTEM_PROMPT = """I will ask you a question, then you should help me operate a MySQL database with SQL to answer the question.
You have to explain the problem and your solution to me and write down your thoughts.
After thinking and explaining thoroughly, every round you can choose to operate or to answer with the two specific tools provided.
If you should execute a SQL query, use the `execute_sql` function, Your SQL should be in one line.
Every time you can only execute one SQL statement. I will only execute the statement in the first SQL code block. Every time you write a SQL, I will execute it for you and give you the output.
If you are done operating, and you want to commit your final answer, then use the `commit_final_answer` function.
DO NOT use this tool unless you are sure about your answer. I expect an accurate and correct answer.
Your answer should be accurate. Your answer must be exactly the same as the correct answer.
If the question is about modifying the database, then after done operation, your answer field can be anything.
If your response cannot match any pattern I mentioned earlier, you will be judged as FAIL immediately.
You should always use the tools provided to submit your answer. Be careful not to write it in the content field.
Your input will be raw MySQL response, you have to deal with it by yourself."""  # noqa: E501 (AgentBench's prompt, verbatim)

NO_TOOL_CALLS = "Internal error: No tool calls found despite finish reason."

TOOLS = [
    {"type": "function", "function": {
        "name": "execute_sql",
        "description": "Executes a given SQL statement on the database and returns the result.",
        "parameters": {"type": "object",
                       "properties": {"query": {"type": "string",
                                                "description": "The SQL query to be executed."}},
                       "required": ["query"], "additionalProperties": False}}},
    {"type": "function", "function": {
        "name": "commit_final_answer",
        "description": "Commits the final answer after all operations are completed.",
        "parameters": {"type": "object",
                       "properties": {"answers": {"type": "array", "items": {"type": "string"},
                                                  "description": "The list of final answers "
                                                                 "to commit."}},
                       "required": ["answers"], "additionalProperties": False}}},
]


def user_prompt(entry: dict[str, Any]) -> str:
    text = ""
    if entry.get("evidence"):
        text += "Evidence about the question: " + entry["evidence"] + "\n"
    if entry.get("add_description"):
        text += ("Additional table information about the question: "
                 + entry["add_description"] + "\n")
    return text + "Question: " + entry["description"] + "\n"


def gold_sql(entry: dict[str, Any]) -> str:
    """The SQL that produces the gold state of a modification task (or a query's gold SQL)."""
    if is_modification(entry["type"][0]) and entry.get("label"):
        return entry["label"][0]
    return (entry.get("sql") or {}).get("query", "")


def _first_argument(arguments: dict[str, Any], name: str) -> Any:
    """AgentBench reads the first argument whatever its name; prefer the documented one."""
    if name in arguments:
        return arguments[name]
    return next(iter(arguments.values()), None)


class DBTask(Task):
    """`split` is "train" or "test"; `backend` None/"sqlite" or a mysql://… URL;
    `memory_limit_mb` caps each episode's database (SQLite's in memory, MariaDB's on disk);
    `statement_timeout_s` each statement (AgentBench's 60 s)."""

    tools = TOOLS

    def __init__(self, split: str = "train", backend: str | None = None, max_rounds: int = 15,
                 train_size: int = 2000, test_size: int = 200, concurrency: int = 32,
                 data_dir: str | None = None, scratch_dir: str | None = None,
                 memory_limit_mb: int = DEFAULT_MEMORY_LIMIT_BYTES // 2**20,
                 statement_timeout_s: float = STATEMENT_TIMEOUT_S) -> None:
        self.split = split
        self.name = task_key("db", split)
        self.backend = backend
        self.max_rounds = max_rounds
        self.concurrency = concurrency
        self.memory_limit_bytes = memory_limit_mb * 2**20
        self.statement_timeout_s = statement_timeout_s
        self.entries = load_split(split, train_size, test_size, data_dir or DEFAULT_DATA_DIR)

    def indices(self) -> list[SampleIndex]:
        return list(range(len(self.entries)))

    def entry(self, index: SampleIndex) -> dict[str, Any]:
        if not isinstance(index, int) or not 0 <= index < len(self.entries):
            raise ValueError(f"{self.name} has no sample {index!r}")
        return self.entries[index]

    async def episode(self, index: SampleIndex, session: Session) -> EpisodeResult:
        entry = self.entry(index)
        database = open_database(self.backend, self.memory_limit_bytes, self.statement_timeout_s)
        try:
            await database.create(entry)
            session.inject({"role": "system", "content": SYSTEM_PROMPT})
            session.inject({"role": "user", "content": user_prompt(entry)})
            return await DBRounds(self, entry, database, session).run()
        finally:
            await database.close()

    async def grade(self, entry: dict[str, Any], database: Database, answers: Any) -> bool:
        if not is_modification(entry["type"][0]):
            return answers_match(answers, entry.get("label"))
        state = await database.table_hash(entry)
        if entry.get("answer_md5"):
            return state == md5_from_result(entry["answer_md5"])
        return state == await self.gold_state(entry)

    async def gold_state(self, entry: dict[str, Any]) -> str:
        """The table hash after the gold SQL on a fresh database of the same backend."""
        reference = open_database(self.backend, self.memory_limit_bytes, self.statement_timeout_s)
        try:
            await reference.create(entry)
            await reference.execute(gold_sql(entry))
            return await reference.table_hash(entry)
        finally:
            await reference.close()

    def metrics(self, entry: dict[str, Any], rounds: int, correct: bool) -> dict[str, Any]:
        return {"type": entry["type"][0], "rounds": rounds, "correct": bool(correct),
                "source": entry.get("source", "")}


class DBRounds(ToolRounds):
    """One episode's rounds on its own database: the SQL tools and the grading of the answer.

    A call whose arguments are not a JSON object reads why (`call.error`) or `BAD_ARGUMENTS`,
    an unknown tool `UNKNOWN_FUNCTION` (the `ToolRounds` defaults); both cost the round.
    """

    def __init__(self, task: DBTask, entry: dict[str, Any], database: Database,
                 session: Session) -> None:
        super().__init__(session, task.max_rounds)
        self.task, self.entry, self.database = task, entry, database

    def tool(self, name: str) -> ToolHandler | None:
        return {"execute_sql": self.execute_sql,
                "commit_final_answer": self.commit_final_answer}.get(name)

    async def without_calls(self, turn: AgentTurn) -> Reply:
        return Reply(NO_TOOL_CALLS)

    async def execute_sql(self, call: ToolCall, arguments: dict[str, Any]) -> Reply:
        query = _first_argument(arguments, "query")
        return Reply(await self.database.execute(str(query or ""), self.task.statement_timeout_s)
                     or "No response from database.")

    async def commit_final_answer(self, call: ToolCall, arguments: dict[str, Any]) -> Reply:
        correct = await self.task.grade(self.entry, self.database,
                                        _first_argument(arguments, "answers"))
        return Reply(ending=EpisodeResult(SampleStatus.COMPLETED, reward=float(correct),
                                          metrics=self.task.metrics(self.entry, self.round,
                                                                    correct)))

    def limit_reached(self) -> EpisodeResult:
        return EpisodeResult(SampleStatus.TASK_LIMIT_REACHED, reward=0.0,
                             metrics=self.task.metrics(self.entry, self.max_rounds, False))
