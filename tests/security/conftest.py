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


@pytest.fixture(scope="module")
def webshop_params(tmp_path_factory) -> dict:
    from tests.environments.webshop.webshop_helpers import SMALL_STORE

    return {"split": "test", "data_path": str(tmp_path_factory.mktemp("webshop_store")),
            **SMALL_STORE}


@pytest.fixture(scope="module")
def webshop_task(webshop_params):
    """The task the worker serves, in this process (for its oracle)."""
    pytest.importorskip("bm25s")
    from environments.webshop.task import WebShopTask

    return WebShopTask(**webshop_params)


@pytest.fixture(scope="module")
def webshop_worker(webshop_task, webshop_params) -> Iterator[str]:
    with running_worker("webshop", webshop_params) as api:
        yield api
