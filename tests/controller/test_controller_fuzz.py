"""Property-based fuzzing of the controller's HTTP API: no 5xx, no crash, no leaked session."""

from __future__ import annotations

import json

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.controller_fleet import ThreadFleet, echo_call

LAST_SESSION = "<last session>"   # replaced by the id of the last session a fuzzed start opened

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner,
                                                                max_size=4),
    max_leaves=10)
plausible = st.fixed_dictionaries({}, optional={
    "name": st.sampled_from(["echo", "nope", "", 7]),
    "index": st.one_of(st.integers(-2, 120), st.text(max_size=5), st.none()),
    "custom_task": st.one_of(json_values, st.just({"turns": 2})),
    "messages": st.one_of(st.lists(st.one_of(json_values, st.just(echo_call("f"))), max_size=3),
                          json_values),
    "worker_id": st.one_of(st.text(max_size=10), st.integers()),
    "stale": json_values,
    "address": st.one_of(st.text(max_size=30), st.just("http://127.0.0.1:9/api"),
                         st.just("http://[::1/api")),
    "concurrency": st.one_of(st.integers(-5, 10**6), st.text(max_size=3)),
    "indices": st.one_of(st.lists(st.integers(0, 5), max_size=5), json_values),
})
bodies = st.one_of(st.binary(max_size=100), json_values.map(json.dumps),
                   plausible.map(json.dumps))
headers = st.one_of(st.just({}), st.just({"session_id": LAST_SESSION}),
                    st.builds(lambda v: {"session_id": v},
                              st.one_of(st.integers(-10, 10**15).map(str),
                                        st.text(alphabet=st.characters(min_codepoint=33,
                                                                       max_codepoint=126),
                                                max_size=10))))
queries = st.one_of(st.just({}), st.fixed_dictionaries({}, optional={
    "name": st.one_of(st.sampled_from(["echo", "nope"]), st.text(max_size=5)),
    "force": st.sampled_from(["true", "false", "1", "maybe"]),
}))
requests = st.tuples(
    st.sampled_from([("POST", "/start_sample")] * 4 + [("POST", "/interact")] * 4 + [
        ("POST", "/cancel"), ("POST", "/cancel_all"), ("POST", "/mark_stale"),
        ("POST", "/receive_heartbeat"), ("POST", "/cancel_notice"), ("GET", "/get_indices"),
        ("GET", "/list_workers"), ("GET", "/list_sessions"), ("GET", "/version"),
        ("POST", "/clean_session")]),
    bodies, headers, queries)


@pytest.fixture(scope="module")
def fleet():
    fleet = ThreadFleet()
    fleet.add_worker(concurrency=16)
    yield fleet
    fleet.close()


def test_fuzzed_requests(fleet):
    last_session = ["1"]

    @settings(max_examples=400, deadline=None, suppress_health_check=list(HealthCheck))
    @given(request=requests)
    def one_request(request):
        (method, path), body, header, query = request
        header = {k: (last_session[0] if v == LAST_SESSION else v) for k, v in header.items()}
        response = fleet.http.request(method, path, content=body, headers=header, params=query)
        assert response.status_code < 500, (path, body, response.text)
        if path == "/start_sample" and response.status_code == 200:
            last_session[0] = response.headers["session_id"]

    one_request()

    # The controller still works, and nothing leaks: after a forced cancel_all, no session runs
    # anywhere and the worker's slots are all free.
    worker = fleet.workers[0]
    assert fleet.http.get("/version").status_code == 200
    assert fleet.http.post("/cancel_all", params={"force": "true"}).status_code == 200
    fleet.wait_for(lambda: httpx.get(worker.api + "/get_sessions").json() == {})
    assert not [s for s in fleet.sessions().values() if s["status"] == "running"]
    assert fleet.worker_record(worker)["current"] == 0
    assert fleet.worker_record(worker)["status"] == "alive"
