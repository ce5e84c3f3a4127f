"""What the controller refuses before any worker sees it: oversized bodies, unknown indices,
malformed agent turns; and the shape of its 422s."""

from __future__ import annotations

import httpx

from tests.support.controller_fleet import echo_call


def start(fleet, index=0) -> int:
    response = fleet.http.post("/start_sample", json={"name": "echo", "index": index})
    assert response.status_code == 200, response.text
    return int(response.headers["session_id"])


def interact(fleet, session_id: int, messages) -> httpx.Response:
    return fleet.http.post("/interact", headers={"session_id": str(session_id)},
                           json={"messages": messages})


def test_request_bodies_over_the_limit_are_413(make_fleet):
    fleet = make_fleet(max_body_bytes=10_000)
    fleet.add_worker()
    session_id = start(fleet)
    big = [echo_call("x" * 20_000)]
    assert interact(fleet, session_id, big).status_code == 413
    assert fleet.http.post("/start_sample", json={"name": "echo", "index": 0,
                                                  "custom_task": {"x": "y" * 20_000}}
                           ).status_code == 413
    assert fleet.http.post("/receive_heartbeat", json={
        "name": "echo", "address": "http://127.0.0.1:9/api", "concurrency": 1,
        "indices": list(range(5_000))}).status_code == 413

    def chunks():   # no Content-Length: counted as it arrives
        for _ in range(20):
            yield b"x" * 1_000

    assert fleet.http.post("/mark_stale", content=chunks()).status_code == 413
    # The session was not touched, and the limit lets ordinary traffic through.
    step = interact(fleet, session_id, [echo_call("small")])
    assert step.status_code == 200 and step.json()["messages"][0]["content"] == "small"


def test_start_sample_index_is_validated_against_the_task(make_fleet):
    fleet = make_fleet()
    worker = fleet.add_worker()   # indices 0..99
    for index in (100, -5, "3"):
        response = fleet.http.post("/start_sample", json={"name": "echo", "index": index})
        assert response.status_code == 404, (index, response.text)
    for index in (True, 1.5, None, [1]):
        response = fleet.http.post("/start_sample", json={"name": "echo", "index": index})
        assert response.status_code == 422, (index, response.text)
    # -1 with a custom task is the worker's to judge.
    response = fleet.http.post("/start_sample", json={"name": "echo", "index": -1,
                                                      "custom_task": {"turns": 1}})
    assert response.status_code == 200
    # Nothing refused reached the worker.
    assert list(httpx.get(worker.api + "/get_sessions").json()) == \
        [response.headers["session_id"]]


def test_422_detail_is_a_json_list_as_fastapi_gives_it(make_fleet):
    fleet = make_fleet()
    fleet.add_worker()
    response = fleet.http.post("/start_sample", json={"name": "echo", "index": True})
    assert response.status_code == 422
    detail = response.json()["detail"]
    assert isinstance(detail, list) and detail[0]["loc"][:2] == ["body", "index"]
    assert {"type", "loc", "msg"} <= set(detail[0])
    response = fleet.http.post("/receive_heartbeat", json={"name": "echo"})
    assert response.status_code == 422 and isinstance(response.json()["detail"], list)


def test_malformed_agent_turns_are_422_and_the_session_goes_on(make_fleet):
    fleet = make_fleet()
    worker = fleet.add_worker()
    session_id = start(fleet)
    for messages in ([], [{}], [{"role": "user", "content": "hi"}], ["text"],
                     [{"role": "assistant", "content": 5}],
                     [{"role": "assistant", "tool_calls": [{"function": {"name": "echo"}}]}]):
        response = interact(fleet, session_id, messages)
        assert response.status_code == 422, (messages, response.text)
        assert response.json()["detail"][0]["loc"][:2] == ["body", "messages"]
    assert fleet.sessions()[session_id]["status"] == "running"
    assert httpx.post(worker.api + "/sample_status",
                      json={"session_id": session_id}).json()["status"]["turns"] == 0
    step = interact(fleet, session_id, [echo_call("still here")])
    assert step.status_code == 200 and step.json()["messages"][0]["content"] == "still here"
