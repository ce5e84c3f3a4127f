"""Admission control: generation may not run more than S weight versions ahead of training.

Group g (counting from 0 over the whole run) may start only once the trainer has reached
version ⌊g / groups_per_step⌋ − S. With S = 0 this is synchronous-ish (each step's groups start
only after the previous update); larger S lets generation run ahead and overlap training, at
the price of staler tokens. AReaL bounds staleness the same way.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable


class StalenessGate:
    def __init__(self, groups_per_step: int, max_staleness: int, started_groups: int = 0,
                 version: int = 0):
        if groups_per_step < 1 or max_staleness < 0:
            raise ValueError("groups_per_step must be >= 1 and max_staleness >= 0")
        self.groups_per_step = groups_per_step
        self.max_staleness = max_staleness
        self.started = started_groups
        self.version = version
        self._advanced = asyncio.Condition()

    def allowed(self, pending: int = 0) -> bool:
        """Whether the next group may start now (with `pending` more groups counted as
        started)."""
        return ((self.started + pending) // self.groups_per_step
                <= self.version + self.max_staleness)

    async def admit(self) -> int:
        """Waits for permission to start a group; returns its sequence number."""
        async with self._advanced:
            await self._advanced.wait_for(self.allowed)
            return self._take_number()

    async def try_admit(self) -> int | None:
        """Admits a group if the gate is open now (its sequence number), else None; never
        waits for the gate (a remote worker's claim is answered at once and asked again)."""
        async with self._advanced:
            return self._take_number() if self.allowed() else None

    async def wait_open(self, pending: Callable[[], int]) -> None:
        """Waits until a group started now would be admitted, counting `pending()` groups
        started elsewhere that are not counted yet (`count_started` counts them when they
        arrive); takes no number. A source of external groups paces itself by this
        (`RLPipeline.wait_for_admission`)."""
        async with self._advanced:
            await self._advanced.wait_for(lambda: self.allowed(pending()))

    def count_started(self) -> int:
        """Counts a group that was started elsewhere and is already played (a served group,
        `RLPipeline.add_group`): it takes a number without waiting, so it shares the
        bound with the groups admitted here, and a discarded one is `release`d like them."""
        return self._take_number()

    def _take_number(self) -> int:
        number = self.started
        self.started += 1
        return number

    async def advance(self, version: int) -> None:
        """The trainer reached `version`: wake the workers it unblocks."""
        async with self._advanced:
            self.version = version
            self._advanced.notify_all()

    async def release(self, num_groups: int) -> None:
        """Returns admission for groups that will never be trained (dropped as stale, or with
        no trainable member), so that replacements can start and the trainer cannot starve."""
        if num_groups <= 0:
            return
        async with self._advanced:
            self.started -= num_groups
            self._advanced.notify_all()
