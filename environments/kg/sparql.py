"""SPARQL backends: an embedded pyoxigraph store, or any SPARQL 1.1 endpoint over HTTP.

All answer `select(query)` with rows of plain strings: IRIs in Freebase's namespace lose the
namespace (`http://rdf.freebase.com/ns/m.0abc` → `m.0abc`), literals become their lexical value,
as AgentBench's `SparqlExecuter` returns them. All are synchronous; the task calls them on the
session's own thread so that one slow query never stalls the worker's other sessions.

`session()` gives the backend one episode uses; its `close()` stops that episode's running
query where the backend can: `query_processes.QueryProcesses` (the task's embedded graph)
kills it, a remote endpoint's query ends at its HTTP timeout, and the in-process `EmbeddedStore`
(for tests and small graphs) cannot interrupt one.
"""

from __future__ import annotations

from typing import Protocol

import httpx

from environments.kg.ontology import NS


class SessionBackend(Protocol):
    def select(self, query: str) -> list[dict[str, str]]:
        """Runs a SELECT query; each row maps variable names (without '?') to values."""
        ...

    def close(self) -> None:
        """Stops the query running for this session, if the backend can."""
        ...


class SparqlBackend(Protocol):
    def select(self, query: str) -> list[dict[str, str]]:
        """Runs a SELECT query; each row maps variable names (without '?') to values."""
        ...

    def session(self) -> SessionBackend:
        ...


def _plain(value: str) -> str:
    return value[len(NS):] if value.startswith(NS) else value


def solution_rows(solutions) -> list[dict[str, str]]:
    """pyoxigraph's `QuerySolutions` as rows of plain strings."""
    names = [variable.value for variable in solutions.variables]
    rows = []
    for solution in solutions:
        row = {}
        for name in names:
            term = solution[name]
            if term is not None:
                row[name] = _plain(term.value)
        rows.append(row)
    return rows


class _Unscoped:
    """A session of a backend that has nothing to stop: `select` passes through."""

    def __init__(self, backend: SparqlBackend) -> None:
        self.select = backend.select

    def close(self) -> None:
        pass


class EmbeddedStore:
    """An in-memory pyoxigraph store loaded from N-Triples."""

    def __init__(self, ntriples: bytes | str) -> None:
        import pyoxigraph

        self.store = pyoxigraph.Store()
        data = ntriples.encode() if isinstance(ntriples, str) else ntriples
        self.store.bulk_load(data, format=pyoxigraph.RdfFormat.N_TRIPLES)

    def __len__(self) -> int:
        return len(self.store)

    def select(self, query: str) -> list[dict[str, str]]:
        return solution_rows(self.store.query(query))

    def select_json(self, query: str) -> bytes:
        """The SPARQL JSON results of a SELECT query (SyntaxError, or ValueError if no SELECT)."""
        import pyoxigraph

        results = self.store.query(query)
        if not isinstance(results, pyoxigraph.QuerySolutions):
            raise ValueError("only SELECT queries are served")
        return results.serialize(format=pyoxigraph.QueryResultsFormat.JSON)

    def session(self) -> SessionBackend:
        return _Unscoped(self)


class RemoteEndpoint:
    """A SPARQL protocol endpoint (Virtuoso, Fuseki, Oxigraph server, ...) reached by URL.

    `timeout_s` is each query's deadline: past it the request fails (the agent reads why).
    """

    def __init__(self, url: str, timeout_s: float = 60.0) -> None:
        self.url = url
        self.client = httpx.Client(timeout=timeout_s)

    def select(self, query: str) -> list[dict[str, str]]:
        response = self.client.post(
            self.url, data={"query": query},
            headers={"Accept": "application/sparql-results+json"})
        response.raise_for_status()
        bindings = response.json()["results"]["bindings"]
        return [{name: _plain(cell["value"]) for name, cell in row.items()} for row in bindings]

    def session(self) -> SessionBackend:
        return _Unscoped(self)

    def close(self) -> None:
        self.client.close()
