"""Every evaluated episode's transcript, to read why it ended as it did.

`TranscriptLog` is an `on_episode` callback of `agentbench.evaluate`: it keeps each finished
rollout's task, index, pass, reward, status, turn count and messages, and `write` puts them in
`OUT/NAME_episodes.jsonl`, one episode per line, ordered by task and index so that two runs
diff line by line. `evaluation.first_call.summarize` reads these records.

With a `journal`, each record is also appended to that file the moment its episode ends, so an
evaluation that is stopped (a kill, a preempted VM) resumes where it was: `resume` reads the
records back (a line torn by the kill is dropped) and `finished_rollouts` turns them into what
`agentbench.evaluate(finished=...)` skips. The journal's first line names what it is a journal
of (`key`); a journal of anything else is started afresh.
"""

from __future__ import annotations

import json
import pathlib
from typing import Any

import numpy as np

from agentrl_jax.episode import SampleStatus
from agentrl_jax.rollout.record import Rollout


def transcripts_path(out: pathlib.Path, name: str) -> pathlib.Path:
    """Where the transcripts of evaluation `name` go."""
    return out / f"{name}_episodes.jsonl"


def _order(episode: dict[str, Any]) -> tuple:
    """Task, then index: numerically for integer indices, as text for any other."""
    index = episode["index"]
    return (episode["task"], *((0, index, "") if isinstance(index, int) else (1, 0, str(index))))


class TranscriptLog:
    """The episodes of one evaluation, recorded as they finish (and journaled, with one)."""

    def __init__(self, journal: pathlib.Path | None = None, key: str = "") -> None:
        self.episodes: list[dict[str, Any]] = []
        self.journal, self.key = journal, key

    def resume(self) -> list[dict[str, Any]]:
        """The records of the journal, if it is one of `key`, as this log's own; else a fresh
        journal. Returns the records read."""
        if self.journal is None:
            return []
        records = _read_journal(self.journal, self.key) or []
        # rewritten whole, so that what this process appends follows no torn line
        self.journal.write_text("".join(json.dumps(line, default=str) + "\n" for line in
                                        [{"journal_of": self.key}, *records]))
        self.episodes = list(records)
        return records

    def __call__(self, rollout: Rollout) -> None:
        record = {"task": rollout.task, "index": rollout.index, "run": rollout.group_id,
                  "reward": rollout.reward, "status": str(rollout.status),
                  "turns": rollout.num_turns, "messages": rollout.messages}
        self.episodes.append(record)
        if self.journal is not None:
            with open(self.journal, "a") as f:
                f.write(json.dumps(record, default=str) + "\n")

    def write(self, out: pathlib.Path, name: str) -> pathlib.Path:
        path = transcripts_path(out, name)
        with open(path, "w") as f:
            for episode in sorted(self.episodes, key=_order):
                f.write(json.dumps(episode, default=str) + "\n")
        return path


def _read_journal(path: pathlib.Path, key: str) -> list[dict[str, Any]] | None:
    """A journal's records, or None if there is none of `key` at `path`."""
    if not path.exists():
        return None
    lines = path.read_text().splitlines()
    try:
        if not lines or json.loads(lines[0]) != {"journal_of": key}:
            return None
    except json.JSONDecodeError:
        return None
    records = []
    for line in lines[1:]:
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:   # the line a kill tore: that episode is played again
            break
    return records


def finished_rollouts(records: list[dict[str, Any]]) -> list[Rollout]:
    """Journal records as the rollouts `agentbench.evaluate` summarises (outcome, no tokens)."""
    empty = np.zeros(0, np.int32)
    return [Rollout(task=r["task"], index=r["index"], group_id=int(r.get("run", 0)), member=0,
                    tokens=empty, loss_mask=empty, logprobs=np.zeros(0, np.float32),
                    versions=empty, policy_ids=empty, reward=float(r["reward"]),
                    status=SampleStatus.parse(r["status"]), num_turns=int(r["turns"]),
                    messages=r["messages"]) for r in records]
