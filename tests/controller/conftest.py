"""Fixtures of the controller tests."""

from __future__ import annotations

import pytest

from tests.support.controller_fleet import ThreadFleet


@pytest.fixture
def make_fleet():
    """Builds in-thread fleets (`make_fleet(**controller_settings)`) and stops them after."""
    fleets: list[ThreadFleet] = []

    def make(**controller_settings) -> ThreadFleet:
        fleets.append(ThreadFleet(**controller_settings))
        return fleets[-1]

    yield make
    for fleet in fleets:
        fleet.close()
