"""Tic-tac-toe fixtures: the test split, and one real worker process serving it over HTTP."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from environments.oracle import running_worker
from environments.registry import load_task


@pytest.fixture(scope="session")
def test_task():
    return load_task("tictactoe", split="test")


@pytest.fixture(scope="session")
def worker() -> Iterator[str]:
    """The /api URL of `python -m environments.worker --task tictactoe --param split=test`."""
    with running_worker("tictactoe", {"split": "test"}) as api:
        yield api
