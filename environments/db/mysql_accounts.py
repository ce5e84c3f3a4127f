"""Per-episode accounts on a shared MySQL/MariaDB server: each episode sees its database only.

With one shared account, an agent could list and write other sessions' databases, read host
files with `LOAD_FILE` and write some with `INTO OUTFILE`. Instead, the worker's account (see
`mariadb_server`) creates for each episode a database and a user of the same name, with these
rights on that database alone: no FILE, no GRANT, no rights on any other database, at most two
connections. `SHOW DATABASES` then lists only the episode's own.

The user reads and changes rows, drops or empties tables and makes views; it cannot create,
alter or index tables, nor make temporary ones. Every statement that can grow the episode's
files is then a transaction the worker can roll back, which is how it keeps the database under
its size limit (`mysql_database`); the worker creates the task's tables itself.

MariaDB also gets the user resource limit `MAX_STATEMENT_TIME`; a session may lower or lift its
own `max_statement_time`, so the guarantee is the worker's: past the statement timeout it kills
the query from its own account (`mysql_database.MySQLDatabase.execute`).
"""

from __future__ import annotations

from typing import Any

EPISODE_PRIVILEGES = "SELECT, INSERT, UPDATE, DELETE, DROP, CREATE VIEW, SHOW VIEW"
MAX_CONNECTIONS = 2


def grant_target(database: str) -> str:
    """`database`.* for GRANT, where `_` and `%` are wildcards unless escaped."""
    escaped = database.replace("\\", "\\\\").replace("_", "\\_").replace("%", "\\%")
    return "`" + escaped.replace("`", "``") + "`.*"


def client_host(cursor: Any) -> str:
    """The host part the server gives this connection (`localhost` over the Unix socket)."""
    cursor.execute("SELECT SUBSTRING_INDEX(USER(), '@', -1)")
    return str(cursor.fetchone()[0])


def is_mariadb(cursor: Any) -> bool:
    cursor.execute("SELECT VERSION()")
    return "mariadb" in str(cursor.fetchone()[0]).lower()


def create_episode_account(cursor: Any, name: str, password: str, host: str,
                           statement_timeout_s: float) -> None:
    """Creates database `name` and user `name`@`host` with rights on that database only."""
    limits = f"MAX_USER_CONNECTIONS {MAX_CONNECTIONS}"
    if is_mariadb(cursor):
        limits += f" MAX_STATEMENT_TIME {max(1, int(statement_timeout_s))}"
    cursor.execute(f"CREATE DATABASE `{name}` CHARACTER SET utf8mb4")
    cursor.execute(f"CREATE USER %s@%s IDENTIFIED BY %s WITH {limits}", (name, host, password))
    cursor.execute(f"GRANT {EPISODE_PRIVILEGES} ON {grant_target(name)} TO %s@%s", (name, host))


def drop_episode_account(cursor: Any, name: str, host: str) -> None:
    """Ends the user's connections, then drops its database and the user."""
    cursor.execute("SELECT ID FROM information_schema.PROCESSLIST WHERE USER = %s", (name,))
    for (thread_id,) in cursor.fetchall():
        try:
            cursor.execute(f"KILL CONNECTION {int(thread_id)}")
        except Exception:  # noqa: BLE001 - the connection ended meanwhile
            pass
    cursor.execute(f"DROP DATABASE IF EXISTS `{name}`")
    cursor.execute("DROP USER IF EXISTS %s@%s", (name, host))
