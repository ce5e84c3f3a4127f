"""Fixtures of rollout tests: a real controller and echo workers, each in a thread."""

import pytest


@pytest.fixture
def fleet():
    from tests.support.controller_fleet import ThreadFleet

    fleet = ThreadFleet()
    yield fleet
    fleet.close()
