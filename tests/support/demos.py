"""A small demonstration record (the oracle export's format) for tests of the warm start."""

import json

TOOLS = [{"type": "function", "function": {
    "name": "execute_sql", "description": "Runs SQL.",
    "parameters": {"type": "object", "properties": {"query": {"type": "string"}},
                   "required": ["query"]}}}]


def call(name, **arguments):
    return {"id": "0", "type": "function",
            "function": {"name": name, "arguments": json.dumps(arguments)}}


DEMO = {"task": "db-train", "index": 3, "tools": TOOLS, "reward": 1.0, "messages": [
    {"role": "system", "content": "Answer with SQL."},
    {"role": "user", "content": "How many rows?"},
    {"role": "assistant", "content": "Counting.", "tool_calls": [call("execute_sql",
                                                                       query="SELECT 1")]},
    {"role": "tool", "tool_call_id": "0", "content": "[(1,)]"},
    {"role": "assistant", "content": "Done: 1."},
]}
