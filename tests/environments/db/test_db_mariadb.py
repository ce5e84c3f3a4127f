"""The MySQL/MariaDB backend against a local MariaDB started from Debian's packages.

Skips (with the reason) when the MariaDB server binaries are not installed
(`apt-get install mariadb-server`). The server runs from a temporary data directory on a
Unix socket only, as an unprivileged user, and is stopped at the end.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from environments.db.data import load_split
from environments.db.grading import md5_from_result
from environments.db.mariadb_server import INSTALL_DB, SERVER, MariaDBServer
from environments.db.mysql_database import MySQLDatabase
from environments.db.oracle import Oracle
from environments.oracle import play_all, play_one, running_worker, tool_call_message

pymysql = pytest.importorskip("pymysql", reason="the MySQL backend needs PyMySQL")

DEV = Path(__file__).resolve().parents[3].parent / "shared/data/agentbench/dbbench/dev.jsonl"


@pytest.fixture(scope="module")
def mariadb_url() -> Iterator[str]:
    """The worker's account on a private server (`environments.db.mariadb_server`)."""
    if not (SERVER and INSTALL_DB):
        pytest.skip("MariaDB server binaries not found (Debian: apt-get install mariadb-server)")
    root = tempfile.mkdtemp(prefix="mdb")   # short: a Unix socket path has ~100 bytes
    try:
        with MariaDBServer(root) as server:
            yield server.admin_url
    finally:
        shutil.rmtree(root, ignore_errors=True)


@pytest.mark.skipif(not DEV.exists(), reason=f"AgentBench data not found at {DEV}")
def test_server_hash_reproduces_answer_md5_on_dev(mariadb_url):
    """AgentBench's own hash SQL, run by MariaDB after the gold SQL, gives answer_md5."""
    entries = [json.loads(line) for line in DEV.read_text().splitlines()]
    modifications = [e for e in entries if "answer_md5" in e]
    assert len(modifications) == 40

    async def check(entry) -> None:
        database = MySQLDatabase(mariadb_url)
        try:
            await database.create(entry)
            assert "rror" not in await database.execute(entry["label"][0])
            expected = md5_from_result(entry["answer_md5"])
            assert await database.server_table_hash(entry) == expected, entry["description"]
            assert await database.table_hash(entry) == expected
        finally:
            await database.close()

    async def main() -> None:
        for entry in modifications:
            await check(entry)

    asyncio.run(main())


def test_oracle_and_wrong_answers_through_a_worker_on_mariadb(mariadb_url):
    entries = load_split("test")
    indices = list(range(len(entries)))[::4]   # dev and generated tasks of every kind
    with running_worker("db", {"split": "test", "backend": mariadb_url}) as api:
        records = asyncio.run(play_all(api, Oracle(_Entries(entries)), indices, 8,
                                       progress=False))
        assert [r.index for r in records if not r.success] == []
        wrong = play_one(api, _Fixed(tool_call_message("commit_final_answer",
                                                       {"answers": ["wrong"]})), 0,
                         session_id=10_000)
        assert (wrong.status, wrong.reward) == ("completed", 0.0)
        error = play_one(api, _Sequence([
            tool_call_message("execute_sql", {"query": "SELEC 1"}),
            tool_call_message("commit_final_answer", {"answers": []})]), 0, session_id=10_001)
        assert "SQL syntax" in error.messages[3]["content"]   # MySQL's own error text


class _Entries:
    def __init__(self, entries):
        self.entries = entries

    def entry(self, index):
        return self.entries[index]


class _Fixed:
    def __init__(self, message):
        self.message = message

    def next_message(self, index, history):
        return self.message


class _Sequence:
    def __init__(self, messages):
        self.messages = messages

    def next_message(self, index, history):
        return self.messages[sum(m["role"] == "assistant" for m in history)]
