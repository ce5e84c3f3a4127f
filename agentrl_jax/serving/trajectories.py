"""Token-exact trajectories of agents that talk to the server over the OpenAI API.

An agent framework sends the whole conversation with every request; re-rendering it would train
on a re-tokenisation of the assistant text, not on the tokens the policy sampled (a tool call's
JSON may re-tokenise differently). So requests that carry one trajectory id form one append-only
token stream, a `chat.conversation.Conversation` as the agent loop keeps (rollout/agent_loop.py):
each turn appends exactly the sampled ids; the messages the agent adds afterwards (tool results,
a user turn) append only their chat-template delta; and the engine session of the stream keeps
its KV cache between turns, so a turn prefills only that delta.

A request continues the stream when its messages are the messages the agent was answered with
(those it sent plus the assistant message returned), followed by at least one non-assistant
message, with the same tools. Anything else (an earlier turn edited, a turn dropped or retried,
the tools changed, an assistant message the policy did not sample) is an edit: it is recorded
and the trajectory goes on in a new segment, a fresh stream rendered from the messages as sent.

`finish` (the reward route) ends a trajectory; `pop_finished` hands finished trajectories out as
the pipeline's `Rollout` records, one per segment, which `serving.groups` forms into the
pipeline's groups. Open trajectories are bounded (`max_open`): the least recently used is
dropped, so an agent that never sends a reward cannot hold the engine's KV pages forever (a
trajectory with a turn in flight is never the one dropped).
"""

from __future__ import annotations

import collections
import dataclasses
import json
import threading
from collections.abc import Sequence
from typing import Any

from agentrl_jax.chat.conversation import Conversation, Message
from agentrl_jax.episode import SampleStatus
from agentrl_jax.rollout.record import Rollout


def comparable(message: Message) -> tuple:
    """What of a message the stream holds: role, text, tool calls (name, parsed arguments).

    Ids are left out (the templates do not render them) and an absent content equals "".
    """
    role = "system" if message.get("role") == "developer" else message.get("role")
    calls = []
    for call in message.get("tool_calls") or ():
        fn = call.get("function", call)
        args = fn.get("arguments", {})
        if isinstance(args, str):
            try:
                args = json.loads(args)
            except ValueError:
                pass
        calls.append((fn.get("name"), json.dumps(args, sort_keys=True)))
    return role, message.get("content") or "", tuple(calls)


def first_difference(a: Sequence[Message], b: Sequence[Message]) -> int:
    """The index of the first message where `a` and `b` differ (the shorter length if none)."""
    pairs = enumerate(zip(a, b, strict=False))
    return next((i for i, (x, y) in pairs if comparable(x) != comparable(y)), min(len(a), len(b)))


@dataclasses.dataclass
class Segment:
    """One append-only stream of a trajectory, and the messages its agent knows it by."""

    conversation: Conversation
    session_id: str  # the engine session that keeps the stream's KV cache
    tools: list[dict[str, Any]] | None
    client_messages: list[Message]  # as sent, plus each assistant message returned
    num_turns: int = 0

    def continues(self, messages: Sequence[Message], tools: list[dict[str, Any]] | None
                  ) -> list[Message] | None:
        """The messages `messages` adds to this stream, or None if they do not extend it."""
        known = self.client_messages
        added = list(messages[len(known):])
        if self.conversation.awaiting_assistant:  # the last turn failed: a retry of it
            return [] if (tools == self.tools and len(messages) == len(known)
                          and first_difference(messages, known) == len(known)) else None
        if (tools != self.tools or not added or first_difference(messages, known) < len(known)
                or any(m.get("role") == "assistant" for m in added)):
            return None
        return added


@dataclasses.dataclass
class Trajectory:
    id: str
    segments: list[Segment] = dataclasses.field(default_factory=list)
    edits: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    busy: bool = False  # a turn is being generated

    @property
    def current(self) -> Segment:
        return self.segments[-1]


class TrajectoryBusyError(RuntimeError):
    """A second turn of a trajectory arrived while one is being generated."""


class TrajectoryStore:
    """Open and finished trajectories by id (used from one asyncio loop)."""

    def __init__(self, tokenizer: Any, parser: str, end_of_turn_ids: Sequence[int],
                 policy_ids: dict[str, int], max_open: int = 1024):
        """`policy_ids`: the id each served engine policy's tokens record (its index in the
        pipeline's policy mix, `rollout.cross_policy`)."""
        self.tokenizer, self.parser = tokenizer, parser
        self.end_of_turn_ids = tuple(end_of_turn_ids)
        self.policy_ids = dict(policy_ids)
        self.max_open = max_open
        self._open: collections.OrderedDict[str, Trajectory] = collections.OrderedDict()
        self._finished: list[Rollout] = []
        self._finished_lock = threading.Lock()
        self.dropped = 0  # trajectories evicted unfinished

    def new_conversation(self, messages: Sequence[Message],
                         tools: list[dict[str, Any]] | None) -> Conversation:
        return Conversation(self.tokenizer, messages, tools, parser=self.parser,
                            end_of_turn_ids=self.end_of_turn_ids)

    def begin_turn(self, trajectory_id: str, messages: Sequence[Message],
                   tools: list[dict[str, Any]] | None) -> tuple[Trajectory, list[str]]:
        """Marks the trajectory busy and brings its stream to `messages`; returns it and the
        engine sessions of trajectories evicted to make room (to be ended).

        Raises TrajectoryBusyError if a turn of it is in flight, and what `Conversation` raises
        for messages it cannot render (the trajectory is then left as it was).
        """
        evicted: list[str] = []
        trajectory = self._open.get(trajectory_id)
        if trajectory is None:
            idle = (key for key, t in self._open.items() if not t.busy)  # oldest first
            while len(self._open) >= self.max_open and (oldest := next(idle, None)) is not None:
                evicted += [s.session_id for s in self._open.pop(oldest).segments]
                self.dropped += 1
            trajectory = self._open[trajectory_id] = Trajectory(trajectory_id)
        self._open.move_to_end(trajectory_id)
        if trajectory.busy:
            raise TrajectoryBusyError(f"trajectory {trajectory_id!r} has a turn in flight")
        added = trajectory.current.continues(messages, tools) if trajectory.segments else None
        if added:
            trajectory.current.conversation.append_messages(added)
            trajectory.current.client_messages += [dict(m) for m in added]
        elif added is None:
            conversation = self.new_conversation(messages, tools)
            if trajectory.segments:
                known = trajectory.current.client_messages
                trajectory.edits.append({
                    "segment": len(trajectory.segments), "after_turns":
                    sum(s.num_turns for s in trajectory.segments),
                    "first_changed_message": first_difference(messages, known),
                    "messages_sent": len(messages), "messages_known": len(known)})
            trajectory.segments.append(Segment(
                conversation, f"serving/{trajectory_id}/{len(trajectory.segments)}",
                tools, [dict(m) for m in messages]))
        trajectory.busy = True
        return trajectory, evicted

    def end_turn(self, trajectory: Trajectory, *, tokens: Sequence[int] | None = None,
                 logprobs: Sequence[float] = (), versions: Sequence[int] = (),
                 policy: str = "", returned: Message | None = None) -> None:
        """Records the sampled turn (tokens None: the turn failed, the stream waits for a
        retry) and the assistant message the agent was answered with."""
        trajectory.busy = False
        if tokens is None:
            return
        assert returned is not None, "a sampled turn is returned to the agent"
        segment = trajectory.current
        # One turn is generated by one weight version; the minimum, as the agent loop records.
        version = min(versions) if versions else -1
        segment.conversation.append_assistant(tokens, logprobs, policy_version=version,
                                              policy_id=self.policy_ids.get(policy, -1))
        segment.client_messages.append(dict(returned))
        segment.num_turns += 1

    def get(self, trajectory_id: str) -> Trajectory | None:
        return self._open.get(trajectory_id)

    def finish(self, trajectory_id: str, reward: float,
               status: SampleStatus = SampleStatus.COMPLETED, *, task: str = "openai",
               group_id: int = 0, member: int = 0, group_size: int | None = None,
               metrics: dict[str, Any] | None = None) -> list[Rollout]:
        """Ends a trajectory with its reward; returns its rollouts (also kept for
        `pop_finished`). KeyError if it is not open, TrajectoryBusyError if a turn is in flight.
        `group_size`, the size of the group it declares, is kept in each rollout's `metrics`
        (for `serving.groups`).
        """
        trajectory = self._open.get(trajectory_id)
        if trajectory is None:
            raise KeyError(trajectory_id)
        if trajectory.busy:
            raise TrajectoryBusyError(f"trajectory {trajectory_id!r} has a turn in flight")
        del self._open[trajectory_id]
        declared = {} if group_size is None else {"group_size": int(group_size)}
        rollouts = [_rollout(trajectory, i, reward, status, task, group_id, member,
                             {**(metrics or {}), **declared})
                    for i in range(len(trajectory.segments))]
        with self._finished_lock:
            self._finished += rollouts
        return rollouts

    def pop_finished(self) -> list[Rollout]:
        """The rollouts of trajectories finished since the last call, in finishing order, a
        trajectory's segments in order. Safe to call from another thread (the pipeline's loop
        when the server runs in a thread of its own)."""
        with self._finished_lock:
            out, self._finished = self._finished, []
        return out

    def session_ids(self, trajectory: Trajectory) -> list[str]:
        return [s.session_id for s in trajectory.segments]

    @property
    def num_open(self) -> int:
        return len(self._open)


def _rollout(trajectory: Trajectory, index: int, reward: float, status: SampleStatus,
             task: str, group_id: int, member: int, metrics: dict[str, Any]) -> Rollout:
    segment = trajectory.segments[index]
    conv = segment.conversation
    return Rollout(
        task=task, index=trajectory.id, group_id=group_id, member=member,
        tokens=conv.tokens, loss_mask=conv.loss_mask, logprobs=conv.logprobs,
        versions=conv.policy_versions, policy_ids=conv.policy_ids, reward=float(reward),
        status=status, num_turns=segment.num_turns,
        metrics={**metrics, "trajectory_id": trajectory.id, "segment": index,
                 "segments": len(trajectory.segments), "edits": len(trajectory.edits)},
        messages=conv.messages)
