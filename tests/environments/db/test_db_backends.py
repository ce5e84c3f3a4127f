"""The SQLite session database: one statement per call, text results, the statement timeout."""

from __future__ import annotations

import asyncio

from environments.db.backends import SQLiteDatabase
from environments.db.mysql_database import mysql_params

ENTRY = {"table": {"table_name": "Team Stats", "table_info": {
    "columns": [{"name": "Team", "type": "TEXT"}, {"name": "Wins", "type": "INT"}],
    "rows": [["Hawks", "12"], ["Owls", "3"]]}}}


def run(coroutine):
    return asyncio.run(coroutine)


def test_results_are_python_row_tuples_as_text_and_changes_persist():
    async def main():
        db = SQLiteDatabase()
        await db.create(ENTRY)
        assert await db.execute("SELECT * FROM `Team Stats` ORDER BY Team") == \
            "[('Hawks', '12'), ('Owls', '3')]"   # AgentBench stores every value as TEXT
        assert await db.execute("UPDATE `Team Stats` SET Wins = '4' WHERE Team = 'Owls'") == "[]"
        assert await db.execute("SELECT Wins FROM `Team Stats` WHERE Team = 'Owls'") == "[('4',)]"
        await db.close()
    run(main())


def test_typed_tables_keep_numbers():
    async def main():
        db = SQLiteDatabase()
        await db.create({**ENTRY, "typed_columns": True})
        assert await db.execute("SELECT Team FROM `Team Stats` WHERE Wins > 5") == "[('Hawks',)]"
        await db.close()
    run(main())


def test_a_runaway_statement_is_stopped_at_the_timeout():
    async def main():
        db = SQLiteDatabase()
        await db.create(ENTRY)
        endless = ("WITH RECURSIVE n(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM n) "
                   "SELECT count(*) FROM n")
        assert await db.execute(endless, timeout=0.2) == "Error: SQL execution timed out."
        assert await db.execute("SELECT count(*) FROM `Team Stats`") == "[(2,)]"   # still usable
        await db.close()
    run(main())


def test_mysql_urls():
    assert mysql_params("mysql://bob:s%40cret@db.local:3307") == {
        "host": "db.local", "port": 3307, "user": "bob", "password": "s@cret"}
    assert mysql_params("mariadb://root@localhost?unix_socket=/tmp/m.sock")["unix_socket"] == \
        "/tmp/m.sock"
