"""The task worker's HTTP API over real loopback HTTP, including fuzzed bad input."""

from __future__ import annotations

import json

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from environments.echo import EchoTask
from environments.fleet import ServerThread
from environments.worker.server import WorkerConfig, create_worker_app


def echo_call(text: str) -> dict:
    return {"role": "assistant", "content": "",
            "tool_calls": [{"id": "0", "type": "function",
                            "function": {"name": "echo", "arguments": json.dumps({"text": text})}}]}


@pytest.fixture(scope="module")
def worker():
    app = create_worker_app(EchoTask(rounds=3), WorkerConfig(concurrency=4))
    with ServerThread(app) as server, httpx.Client(base_url=server.api, timeout=10) as http:
        yield http


@pytest.fixture(autouse=True)
def no_sessions_left(worker):
    yield
    worker.post("/cancel_all")
    assert worker.get("/worker_status").json()["current"] == 0


def start(http: httpx.Client, session_id: int, index: int = 0) -> httpx.Response:
    return http.post("/start_sample", json={"index": index, "session_id": session_id})


def test_episode_over_http(worker):
    response = start(worker, 11)
    assert response.status_code == 200 and response.headers["session_id"] == "11"
    body = response.json()
    assert set(body) == {"messages", "tools", "status", "finish", "reward", "metric"}
    assert body["status"] == "running" and body["finish"] is False
    assert worker.get("/get_sessions").json() == {"11": 0}
    for round_number, text in enumerate(["a", "b", "c"]):
        step = worker.post("/interact", json={"session_id": 11, "messages": [echo_call(text)]})
        assert step.status_code == 200
        out = step.json()
        assert out["session_id"] == 11
        assert out["env_out"]["messages"][-1]["content"] == text
        assert out["env_out"]["finish"] is (round_number == 2)
    assert out["env_out"]["status"] == "completed" and out["env_out"]["reward"] == 1.0
    assert worker.get("/get_sessions").json() == {}


def test_capacity_is_406_and_cancel_frees_slots(worker):
    for session_id in range(4):
        assert start(worker, session_id).status_code == 200
    assert start(worker, 99).status_code == 406
    assert worker.get("/worker_status").json()["current"] == 4
    assert worker.post("/cancel", json={"session_id": 2}).json() == {"session_id": 2}
    assert worker.get("/worker_status").json()["current"] == 3
    assert start(worker, 99).status_code == 200
    assert start(worker, 100).status_code == 406


def test_unknown_and_duplicate_sessions_are_400(worker):
    assert start(worker, 5).status_code == 200
    assert start(worker, 5).status_code == 400
    assert worker.post("/interact", json={"session_id": 6, "messages": []}).status_code == 400
    assert worker.post("/cancel", json={"session_id": 6}).status_code == 400
    assert worker.post("/sample_status", json={"session_id": 6}).status_code == 400
    assert worker.post("/sample_status", json={"session_id": 5}).json()["index"] == 0


def test_get_indices(worker):
    assert worker.get("/get_indices").json() == list(range(100))


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=12)
fuzz_bodies = st.one_of(
    st.binary(max_size=200),
    json_values.map(lambda v: json.dumps(v).encode()),
    st.fixed_dictionaries({}, optional={
        "session_id": st.one_of(st.integers(), st.text(), st.none(), st.floats()),
        "index": st.one_of(st.integers(), st.text(), st.none(), st.lists(st.integers())),
        "messages": st.one_of(st.lists(json_values, max_size=3), json_values),
        "custom_task": json_values,
    }).map(lambda v: json.dumps(v).encode()))
endpoints = st.sampled_from(["/start_sample", "/interact", "/cancel", "/cancel_with_notice",
                             "/sample_status"])


@settings(max_examples=150, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(endpoint=endpoints, body=fuzz_bodies)
def test_fuzzed_requests_never_5xx(worker, endpoint, body):
    response = worker.post(endpoint, content=body, headers={"content-type": "application/json"})
    assert response.status_code < 500, response.text
    # Anything a fuzzed start managed to open is cancelled by the autouse fixture at the end;
    # here it must never exceed capacity.
    assert worker.get("/worker_status").json()["current"] <= 4
    if response.status_code == 200 and endpoint == "/start_sample":
        worker.post("/cancel", json={"session_id": int(response.headers["session_id"])})
