"""The child process of `query_processes`: answers SPARQL queries on a read-only store.

`python -m environments.kg.query_child STORE_DIR`. Protocol, one JSON value per line: it writes
`["ready"]` once the store is open, then reads `[mode, query]` and writes `["ok", payload]`
(mode "rows": a list of rows of plain strings; "json": the SPARQL JSON results text) or
`["error", kind, text]` (kind "syntax" for a malformed query).
"""

from __future__ import annotations

import json
import sys
from typing import Any


def serve(store_dir: str) -> None:
    """Serves queries from stdin to stdout until stdin closes (see the module docstring)."""
    import pyoxigraph

    from environments.kg.sparql import solution_rows

    store = pyoxigraph.Store.read_only(store_dir)
    out = sys.stdout
    out.write('["ready"]\n')
    out.flush()
    for line in sys.stdin:
        mode, query = json.loads(line)
        try:
            results = store.query(query)
            if mode == "json":
                if not isinstance(results, pyoxigraph.QuerySolutions):
                    raise ValueError("only SELECT queries are served")
                payload: Any = results.serialize(
                    format=pyoxigraph.QueryResultsFormat.JSON).decode()
            else:
                payload = solution_rows(results)
            answer: list[Any] = ["ok", payload]
        except SyntaxError as error:
            answer = ["error", "syntax", str(error)]
        except Exception as error:  # the store's own errors: reported to the caller
            answer = ["error", type(error).__name__, str(error)]
        out.write(json.dumps(answer) + "\n")
        out.flush()


if __name__ == "__main__":
    serve(sys.argv[1])
