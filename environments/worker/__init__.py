"""The task-worker framework: `Task`/`Session` for environments, and the HTTP server around them.

A new environment is one folder: `environments/<name>/__init__.py` defines a `Task` subclass
(`indices()`, `async episode(index, session)`) and sets `TASK = ThatClass`. Then

    python -m environments.worker --task <name> --controller http://HOST:5020/api --port 5021

serves it with AgentRL's task-worker protocol and registers it with the controller. An episode
of rounds of tool calls can be a `ToolRounds` subclass (`rounds.py`): the loop, the parsing of
calls and the answering of mistakes are there, the task's tools and reward in the subclass.
"""

from environments.worker.rounds import Reply, Rounds, ToolRounds
from environments.worker.task import AgentTurn, EpisodeResult, Session, Task, ToolCall

__all__ = ["AgentTurn", "EpisodeResult", "Reply", "Rounds", "Session", "Task", "ToolCall",
           "ToolRounds"]
