"""A minimal SPARQL protocol endpoint over the embedded store (SELECT queries, JSON results).

`python -m environments.kg.sparql_server --port 3001` serves the geography graph so that several
KG workers can share one store (`--param sparql_url=http://127.0.0.1:3001/sparql`), the way
AgentBench's workers share one Virtuoso. Tests use it as the loopback "remote" endpoint.

The server runs its queries in killable child processes (`query_processes`) with a deadline
(`--deadline`), so that a client's endless query stops even when the client has gone.
"""

from __future__ import annotations

import argparse
import asyncio
import urllib.parse

from fastapi import FastAPI, Request
from starlette.responses import JSONResponse, Response

from environments.kg.query_processes import DEFAULT_DEADLINE_S, QueryDeadline, QueryProcesses
from environments.kg.sparql import EmbeddedStore

RESULTS_JSON = "application/sparql-results+json"


def create_sparql_app(store: EmbeddedStore | QueryProcesses) -> FastAPI:
    app = FastAPI(title="SPARQL endpoint")

    def run(query: str) -> Response:
        try:
            body = store.select_json(query)
        except (SyntaxError, ValueError) as error:
            return JSONResponse({"error": str(error)}, status_code=400)
        except QueryDeadline as error:
            return JSONResponse({"error": str(error)}, status_code=503)
        return Response(body, media_type=RESULTS_JSON)

    async def answer(query: str | None) -> Response:
        if not query:
            return JSONResponse({"error": "missing 'query'"}, status_code=400)
        return await asyncio.to_thread(run, query)   # keep the event loop free meanwhile

    @app.get("/sparql")
    async def sparql_get(request: Request) -> Response:
        return await answer(request.query_params.get("query"))

    @app.post("/sparql")
    async def sparql_post(request: Request) -> Response:
        if request.headers.get("content-type", "").startswith("application/sparql-query"):
            return await answer((await request.body()).decode())
        # Form-encoded, parsed by hand: FastAPI's form parsing needs python-multipart.
        form = urllib.parse.parse_qs((await request.body()).decode())
        return await answer(form.get("query", [None])[0])

    return app


def main(argv: list[str] | None = None) -> None:
    import uvicorn

    from environments.kg.dataset import geography_graph

    parser = argparse.ArgumentParser(prog="python -m environments.kg.sparql_server")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=3001)
    parser.add_argument("--deadline", type=float, default=DEFAULT_DEADLINE_S,
                        help="seconds one query may run")
    parser.add_argument("--processes", type=int, default=8, help="queries run at once")
    args = parser.parse_args(argv)
    store = QueryProcesses.from_ntriples(geography_graph().to_ntriples(),
                                         processes=args.processes, deadline_s=args.deadline)
    try:
        uvicorn.run(create_sparql_app(store), host=args.host, port=args.port,
                    log_level="warning")
    finally:
        store.close()


if __name__ == "__main__":
    main()
