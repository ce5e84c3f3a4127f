"""KG test fixtures: real worker processes over HTTP, a loopback SPARQL endpoint, a tiny graph."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator

import pytest
import uvicorn

from environments.oracle import running_worker

NS = "http://rdf.freebase.com/ns/"


def worker_process(*params: str):
    """`python -m environments.worker --task kg --param ...` as a context manager yielding
    its /api URL once it serves (the oracle runner's launcher, with KEY=VALUE params)."""
    return running_worker("kg", dict(p.split("=", 1) for p in params))


@contextlib.contextmanager
def serve_in_thread(app) -> Iterator[str]:
    """Runs an ASGI app with uvicorn on a free loopback port; yields http://127.0.0.1:PORT."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 60
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("the SPARQL server did not start")
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()


@pytest.fixture(scope="session")
def test_task():
    """The test split's task in this process (builds the store; questions from the cache)."""
    import asyncio

    from environments.kg import KnowledgeGraphTask

    task = KnowledgeGraphTask(split="test")
    yield task
    asyncio.run(task.close())   # its query processes and on-disk store


@pytest.fixture(scope="session")
def test_worker(test_task) -> Iterator[str]:
    """A real worker serving kg-test with the embedded store."""
    with worker_process("split=test") as api:
        yield api


@pytest.fixture(scope="session")
def sparql_endpoint(test_task) -> Iterator[str]:
    """The same store behind a loopback SPARQL protocol endpoint."""
    from environments.kg.sparql_server import create_sparql_app

    with serve_in_thread(create_sparql_app(test_task.backend)) as base:
        yield f"{base}/sparql"


@pytest.fixture(scope="session")
def remote_worker(sparql_endpoint) -> Iterator[str]:
    """A worker serving kg-test whose tools query the loopback endpoint."""
    with worker_process("split=test", f"sparql_url={sparql_endpoint}") as api:
        yield api


def ntriples(*triples: tuple[str, str, str | int | float]) -> str:
    """N-Triples in Freebase's namespace; ints and floats become typed literals."""
    lines = []
    for subject, predicate, obj in triples:
        if isinstance(obj, bool) or not isinstance(obj, int | float):
            term = f"<{NS}{obj}>"
        elif isinstance(obj, int):
            term = f'"{obj}"^^<http://www.w3.org/2001/XMLSchema#integer>'
        else:
            term = f'"{obj}"^^<http://www.w3.org/2001/XMLSchema#double>'
        lines.append(f"<{NS}{subject}> <{NS}{predicate}> {term} .")
    return "\n".join(lines) + "\n"


@pytest.fixture(scope="session")
def tiny_store():
    """Four countries on two continents, with borders, capitals and populations."""
    from environments.kg.sparql import EmbeddedStore

    schema = [
        ("location.country.borders", "type.property.expected_type", "location.country"),
        ("location.country.continent", "type.property.expected_type", "location.continent"),
        ("location.continent.countries", "type.property.expected_type", "location.country"),
        ("location.country.population", "type.property.expected_type", "type.int"),
    ]
    facts = [(c, "type.object.type", "location.country") for c in ("m.0a", "m.0b", "m.0c",
                                                                    "m.0d")]
    facts += [("m.0eu", "type.object.type", "location.continent"),
              ("m.0as", "type.object.type", "location.continent")]
    for country, continent in (("m.0a", "m.0eu"), ("m.0b", "m.0eu"), ("m.0c", "m.0eu"),
                               ("m.0d", "m.0as")):
        facts += [(country, "location.country.continent", continent),
                  (continent, "location.continent.countries", country)]
    for a, b in (("m.0a", "m.0b"), ("m.0a", "m.0c"), ("m.0c", "m.0d")):
        facts += [(a, "location.country.borders", b), (b, "location.country.borders", a)]
    facts += [("m.0a", "location.country.population", 10),
              ("m.0b", "location.country.population", 30),
              ("m.0c", "location.country.population", 30),
              ("m.0d", "location.country.population", 50)]
    return EmbeddedStore(ntriples(*schema, *facts))
