"""KG episodes through a real worker's HTTP API: rewards, error handling, limits, remote SPARQL."""

from __future__ import annotations

import itertools
import json

import httpx
import pytest

from environments.kg import sexpr
from environments.kg.oracle import Oracle
from environments.kg.prompts import NO_TOOL_CALL, ONE_SHOT

_session_ids = itertools.count(1000)
_client = httpx.Client(timeout=120)   # one connection pool: a new client per call is slow


class Episode:
    """One session on a worker, driven by hand."""

    def __init__(self, api: str, index: int) -> None:
        self.api, self.index, self.id = api, index, next(_session_ids)
        response = _client.post(f"{api}/start_sample",
                                json={"index": index, "session_id": self.id})
        response.raise_for_status()
        self.out = response.json()
        self.history = list(self.out["messages"])

    def send(self, message: dict) -> dict:
        self.history.append(message)
        response = _client.post(f"{self.api}/interact",
                                json={"session_id": self.id, "messages": [message]})
        response.raise_for_status()
        self.out = response.json()["env_out"]
        self.history.extend(self.out["messages"])
        return self.out


def call(name: str, arguments: dict | str, call_id: str = "0") -> dict:
    raw = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return {"role": "assistant", "content": "",
            "tool_calls": [{"id": call_id, "type": "function",
                            "function": {"name": name, "arguments": raw}}]}


def answer(text: str) -> dict:
    return {"role": "assistant", "content": text}


def play_oracle(api: str, oracle: Oracle, index: int) -> dict:
    episode = Episode(api, index)
    while not episode.out["finish"]:
        episode.send(oracle.next_message(index, episode.history))
    return episode.out


def one_per_template(task) -> list[int]:
    first = {}
    for index, item in enumerate(task.items):
        first.setdefault(item["template"], index)
    return sorted(first.values())


def test_prompt_tools_and_indices(test_worker, test_task):
    indices = _client.get(f"{test_worker}/get_indices").json()
    assert indices == list(range(len(test_task.items)))
    episode = Episode(test_worker, 0)
    names = [tool["function"]["name"] for tool in episode.out["tools"]]
    assert names == ["get_relations", "get_neighbors", "intersection", "get_attributes",
                     "argmax", "argmin", "count"]
    messages = episode.out["messages"]
    assert messages[0]["role"] == "system"
    assert "maximum of 15 actions" in messages[0]["content"]
    assert messages[1:1 + len(ONE_SHOT)] == ONE_SHOT      # kg-std shows the one-shot example
    item = test_task.items[0]
    assert messages[-1] == {"role": "user", "content":
                            f"{item['question']}\nEntities: [{', '.join(item['entities'])}]"}
    _client.post(f"{test_worker}/cancel", json={"session_id": episode.id})


def test_oracle_scores_one_on_every_template(test_worker, test_task):
    oracle = Oracle(test_task)
    results = [play_oracle(test_worker, oracle, i) for i in one_per_template(test_task)]
    assert len(results) >= 50
    assert all(out["status"] == "completed" and out["reward"] == 1.0 for out in results)
    assert all(out["metric"]["score"] == 1.0 for out in results)


def test_wrong_answer_scores_zero_with_partial_f1(test_worker, test_task):
    # Answer with the first hop's variable of a two-hop question: a wrong set.
    index = next(i for i, item in enumerate(test_task.items)
                 if item["template"] == "neighbour_capitals")
    oracle = Oracle(test_task)
    episode = Episode(test_worker, index)
    for _ in range(2):   # get_relations, get_neighbors → #0 (the neighbouring countries)
        episode.send(oracle.next_message(index, episode.history))
    out = episode.send(answer("Final Answer: #0"))
    assert out["finish"] and out["status"] == "completed"
    assert out["reward"] == 0.0 and out["metric"]["score"] == 0.0

    # All of a country's neighbours, when the question wants those on one continent only:
    # a superset of the gold answer, so reward 0 but a partial F1.
    def neighbours(country: str) -> set[str]:
        query, column = sexpr.answer_query(f"(JOIN location.country.borders {country})")
        return {row[column] for row in test_task.backend.select(query)}

    index, item = next((i, item) for i, item in enumerate(test_task.items)
                       if item["template"] == "continent_and_neighbour"
                       and len(neighbours(list(item["entities"].values())[1]))
                       > len(item["answer"]))
    episode = Episode(test_worker, index)
    country = list(item["entities"])[1]   # the template's second anchor, {b}
    episode.send(call("get_neighbors", {"variable": country,
                                        "relation": "location.country.borders"}))
    assert episode.out["messages"][0]["content"] == \
        "Observation: variable #0, which are instances of location.country"
    out = episode.send(answer("Thought: #0 it is.\nFinal Answer: #0"))
    assert out["status"] == "completed" and out["reward"] == 0.0
    assert 0.0 < out["metric"]["score"] < 1.0


def test_malformed_and_invalid_calls_get_agentbench_error_observations(test_worker, test_task):
    episode = Episode(test_worker, 0)
    entity = next(iter(test_task.items[0]["entities"]))

    out = episode.send(call("get_relations", '{"variable": "oops'))   # not JSON
    assert out["status"] == "running" and not out["finish"]
    assert out["messages"][0]["role"] == "tool"
    assert out["messages"][0]["content"].startswith("Error processing tool call:")

    out = episode.send(call("get_capital", {"variable": entity}))
    assert out["messages"][0]["content"] == \
        "Provide an invalid function name. Function get_capital does not exist"

    out = episode.send(call("get_neighbors", {"variable": entity}))
    assert out["messages"][0]["content"] == ("Arguments do not match the function signature. "
                                             "Error processing arguments for get_neighbors")

    out = episode.send(call("get_relations", {"variable": "#7"}))
    assert out["messages"][0]["content"].startswith("Error processing tool call:")

    out = episode.send(answer("I think the answer is Paris."))   # no tool call, no answer
    assert out["messages"] == [{"role": "user", "content": NO_TOOL_CALL}]
    assert out["status"] == "running"

    out = episode.send(call("get_relations", {"variable": entity}, call_id="c9"))
    assert out["messages"][0]["tool_call_id"] == "c9"
    assert out["messages"][0]["content"].startswith("Observation: [")

    out = episode.send(answer("Final Answer: #3"))   # no variable #3 was made
    assert out["finish"] and out["status"] == "agent validation failed"


def test_round_limit_ends_with_task_limit_reached(test_worker, test_task):
    episode = Episode(test_worker, 1)
    entity = next(iter(test_task.items[1]["entities"]))
    for round_number in range(1, 16):
        out = episode.send(call("get_relations", {"variable": entity}))
        assert out["finish"] == (round_number == 15)
    assert out["status"] == "task limit reached" and out["reward"] == 0.0


def test_remote_sparql_endpoint_gives_the_same_episodes(remote_worker, test_worker, test_task):
    oracle = Oracle(test_task)
    for index in one_per_template(test_task)[::6]:
        local, remote = Episode(test_worker, index), Episode(remote_worker, index)
        while not local.out["finish"]:
            message = oracle.next_message(index, local.history)
            assert local.send(message)["messages"] == remote.send(message)["messages"]
        assert remote.out["status"] == "completed" and remote.out["reward"] == 1.0


@pytest.mark.slow
@pytest.mark.parametrize("split", ["test", "train"])
def test_oracle_solves_every_generated_question(split):
    """The whole split through a worker: at least 99% reward 1 (in practice all of them)."""
    from environments.kg import KnowledgeGraphTask
    from environments.oracle import running_worker

    task = KnowledgeGraphTask(split=split)
    oracle = Oracle(task)
    with running_worker("kg", {"split": split}) as api:
        rewards = [play_oracle(api, oracle, i)["reward"] for i in range(len(task.items))]
    assert sum(r == 1.0 for r in rewards) >= 0.99 * len(rewards)


def test_one_shot_example_is_true_of_this_graph(test_worker, test_task):
    """Replaying the one-shot's calls (as a custom task) yields exactly its observations."""
    from environments.kg import dataset
    from environments.kg.templates import GraphIndex

    index = GraphIndex(dataset.geography_graph())
    ids = {index.name(entity): entity for entity in index.unique}
    spec = {"question": ONE_SHOT[0]["content"].split("\n")[0],
            "entities": {"Slovenia": ids["Slovenia"], "Europe": ids["Europe"]}, "answer": []}
    session = next(_session_ids)
    start = _client.post(f"{test_worker}/start_sample",
                         json={"index": -1, "session_id": session, "custom_task": spec})
    assert start.json()["status"] == "running"
    turns = [m for m in ONE_SHOT if m["role"] == "assistant" and m.get("tool_calls")]
    observations = [m for m in ONE_SHOT if m["role"] == "tool"]
    for turn, expected in zip(turns, observations, strict=True):
        out = _client.post(f"{test_worker}/interact",
                           json={"session_id": session, "messages": [turn]}).json()["env_out"]
        assert out["messages"] == [expected]
    _client.post(f"{test_worker}/cancel", json={"session_id": session})
