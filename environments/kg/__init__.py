"""Knowledge-graph question answering (AgentBench-FC `kg`) over a geography graph in SPARQL.

`python -m environments.worker --task kg --param split=test --port 0` serves it. Parameters:
`split` (train | test), `seed`, `max_rounds` (15), `one_shot` (default: on for test, as
AgentBench's kg-std), `sparql_url` (a remote SPARQL endpoint instead of the embedded store),
`data_file` (AgentBench-format questions instead of the generated ones), `query_deadline_s` (30:
a query past it is stopped), `query_processes` (4: queries on the embedded graph at once).
"""

from environments.kg.task import KnowledgeGraphTask

TASK = KnowledgeGraphTask
