"""Where the RL pipeline's groups come from: one protocol, whatever plays the episodes.

A *rollout source* plays groups (one (task, index) draw played G times) and hands their
rollouts to the pipeline through a `GroupFeed`, the pipeline's side of the contract. The
pipeline attaches every source when its asynchronous loop starts (the staleness gate exists
then, so nothing is drawn outside it) and detaches them when the loop ends, however it ends.
Three sources ship:

  `AgentLoopSource`                   the project's agent loop, in this process, on the
                                      pipeline's engine (`rollout_workers` coroutines)
  `pipeline.rollout_hub.RolloutHub`   sampling workers in other processes or on other hosts,
                                      claiming groups over HTTP
  `serving.agent_rollouts.AgentRollouts`  an agent program of the user's, run once per member
                                      over the OpenAI-compatible server

Two ways into the feed, by where the group is formed:
- *claimed*: the source asks for a group (`next_group`, waiting for admission, or
  `try_next_group`, not waiting), plays it and delivers each member as its episode ends
  (`deliver`); the group id is the pipeline's from the start.
- *filed*: the source paces itself by the gate (`wait_for_admission`), draws (`draw`), has the
  group played elsewhere and files it whole (`add_group`), which gives it a pipeline group id.

Either way the staleness bound is the pipeline's one gate, group ids are unique across sources
and resumes, and a discarded group's admission comes back. A source whose own work dies
reports it (`fail`); the pipeline raises it instead of waiting for groups that cannot come.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from agentrl_jax.controller.client import ControllerClient
from agentrl_jax.rollout.agent_loop import AgentSpec, play_group
from agentrl_jax.rollout.record import Rollout
from agentrl_jax.sampling.async_engine import AsyncSamplingEngine

# A claimed group: (pipeline group id, task, index).
Claim = tuple[int, str, Any]


class GroupFeed(Protocol):
    """The pipeline's side: admission, draws and the buffer (`runner.RLPipeline`)."""

    @property
    def group_size(self) -> int: ...

    async def next_group(self) -> Claim:
        """Waits for the gate, draws the next (task, index) and opens its group."""
        ...

    async def try_next_group(self) -> Claim | None:
        """`next_group` if the gate admits a group now, else None (never waits)."""
        ...

    def deliver(self, rollout: Rollout) -> None:
        """One finished member of a claimed group."""
        ...

    async def wait_for_admission(self, pending: Callable[[], int]) -> None:
        """Returns once a group started now would be admitted, counting `pending()` groups
        the caller started that have not been filed yet."""
        ...

    def draw(self) -> tuple[str, Any]:
        """The next (task, index) of the pipeline's task stream, for a group to be filed."""
        ...

    def add_group(self, rollouts: Sequence[Rollout]) -> int:
        """Files a whole group played elsewhere; returns its pipeline group id."""
        ...

    def fail(self, error: BaseException) -> None:
        """The source cannot go on: the pipeline raises `error` instead of waiting."""
        ...


class RolloutSource(Protocol):
    """Plays groups into a feed between `attach` and `detach` (both from the pipeline's event
    loop; `detach` is called once after `attach`, also when the run fails)."""

    async def attach(self, feed: GroupFeed) -> None: ...

    async def detach(self) -> None: ...


def require_group_size(source: str, size: int, feed: GroupFeed) -> None:
    """Raises ValueError unless `feed` takes groups of `size`: a source whose group size is
    fixed before it is attached (a hub's workers, served agents) cannot follow another."""
    if feed.group_size != size:
        raise ValueError(f"{source} plays groups of {size}, the pipeline's are "
                         f"{feed.group_size}")


class AgentLoopSource:
    """The project's agent loop (`rollout.agent_loop.play_group`) in this process: `workers`
    coroutines, each claiming a group whenever the gate admits one and playing it on `engine`
    against the environments behind `client` (none: it plays only the groups it is handed,
    `play`, as the synchronous loop does)."""

    def __init__(self, client: ControllerClient, engine: AsyncSamplingEngine,
                 agent: AgentSpec, workers: int, rng: random.Random):
        self.client, self.engine, self.agent = client, engine, agent
        self.workers, self.rng = workers, rng
        self._tasks: list[asyncio.Task] = []

    async def attach(self, feed: GroupFeed) -> None:
        self._tasks = [asyncio.create_task(self._work(feed)) for _ in range(self.workers)]

    async def detach(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks = []

    async def play(self, feed: GroupFeed, claim: Claim) -> None:
        """Plays one claimed group; each member goes to the feed as its episode ends."""
        group_id, task, index = claim
        await play_group(self.client, self.engine, self.agent, task, index, group_id=group_id,
                         group_size=feed.group_size, rng=self.rng, on_rollout=feed.deliver)

    async def _work(self, feed: GroupFeed) -> None:
        try:
            while True:
                await self.play(feed, await feed.next_group())
        except asyncio.CancelledError:
            raise
        except BaseException as error:   # a crashed worker stops the run, not hangs it
            feed.fail(error)
            raise
