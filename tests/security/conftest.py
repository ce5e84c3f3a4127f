"""Real task workers for the red-team tests, one process per task and module."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from environments.oracle import running_worker


@pytest.fixture(scope="module")
def echo_worker() -> Iterator[str]:
    with running_worker("echo", {"num_samples": 4}) as api:
        yield api


@pytest.fixture(scope="module")
def db_worker() -> Iterator[str]:
    """A `db` worker on SQLite (the test split)."""
    with running_worker("db", {"split": "test"}) as api:
        yield api
