"""The first-call judge and the copy rate on hand-made episodes."""

from agentrl_jax.evaluation.first_call import copy_rate, demo_tools, first_call, summarize


def test_first_call_judges_the_format():
    tools = [{"function": {"name": "execute_sql", "parameters": {"required": ["query"]}}},
             {"function": {"name": "commit_final_answer", "parameters": {}}}]

    def turn(name, arguments):
        return [{"role": "system", "content": ""}, {"role": "assistant", "content": "",
                "tool_calls": [{"function": {"name": name, "arguments": arguments}}]}]

    assert first_call(turn("execute_sql", '{"query": "SELECT 1"}'), tools) == "execute_sql"
    assert first_call(turn("commit_final_answer", "{}"), tools) == "commit_final_answer"
    assert first_call(turn("execute_sql", '{"sql": "SELECT 1"}'), tools) is None
    assert first_call(turn("execute_sql", '{"query": '), tools) is None
    assert first_call(turn("other", "{}"), tools) is None
    assert first_call([{"role": "assistant", "content": "SELECT 1"}], tools) is None


def _call(name, arguments):
    return {"function": {"name": name, "arguments": arguments}}


def test_copy_rate_counts_argument_words_seen_earlier():
    messages = [
        {"role": "system", "content": "You are in a kitchen."},
        {"role": "user", "content": "Actions: go to desk 2, take mug 1 from desk 2"},
        {"role": "assistant", "content": "",
         "tool_calls": [_call("take_action", '{"action": "take Mug 1 from table 3"}')]},
        {"role": "tool", "content": "Nothing happens. Actions: go to table 3"},
        {"role": "assistant", "content": "", "tool_calls": [_call("take_action",
                                                                  {"action": "go to table 3"})]},
    ]
    # First call: take, mug, 1, from seen; table, 3 not yet (the key "action" is not counted).
    # Second: go, to, table, 3 all seen in the tool's reply.
    assert copy_rate(messages) == (4 + 4, 6 + 4)
    assert copy_rate(messages[:2]) == (0, 0)


def test_copy_rate_counts_unparseable_arguments_as_written():
    messages = [{"role": "user", "content": "select"},
                {"role": "assistant", "content": "",
                 "tool_calls": [_call("execute_sql", '{"query": "select x')]}]
    assert copy_rate(messages) == (1, 3)   # query, select, x: only select was seen


def test_summarize_counts_format_oracle_tool_and_copies_per_task():
    tools = [{"function": {"name": "execute_sql", "parameters": {"required": ["query"]}}},
             {"function": {"name": "commit_final_answer", "parameters": {}}}]
    task = {"role": "user", "content": "How many rows in table cars?"}

    def episode(name, arguments):
        return {"task": "db-dev", "messages": [task, {"role": "assistant", "content": "",
                                                      "tool_calls": [_call(name, arguments)]}]}

    demo = {"task": "db-train", "tools": tools, "messages": [
        task, {"role": "assistant", "content": "",
               "tool_calls": [_call("execute_sql", '{"query": "SELECT 1"}')]}]}
    def task_of(key):
        return key.split("-")[0]

    schemas, first = demo_tools([demo], task_of)
    assert first == {"db": {"execute_sql"}}
    episodes = [episode("execute_sql", '{"query": "SELECT cars"}'),   # well formed, 1 of 2 copied
                episode("commit_final_answer", "{}"),                  # well formed, not first
                episode("execute_sql", '{"sql": 1}'),                 # malformed
                {"task": "kg-dev", "messages": []}]                   # no schemas: left out
    summary = summarize(episodes, schemas, first, task_of)
    assert summary == {"db": {"episodes": 3, "well_formed": 2 / 3, "oracle_first_tool": 1 / 3,
                              "copy_rate": 1 / 3, "argument_words": 3}}
