"""A private MariaDB server for the DB task, run as an unprivileged user, and its worker account.

    python -m environments.db.mariadb_server --root /srv/dbbench

initialises a data directory under ROOT (once), starts `mariadbd` on a Unix socket only (no
TCP), and prints the URL to give the DB worker (`--param backend=URL`). Run as root, the server
drops to the `mysql` system user (Debian's mariadb-server package creates it); run as anyone
else, it runs as that user. Either way no server process runs as root.

The worker connects as `dbbench_admin`, an account that can only create and drop databases named
`dbbench_*` and the per-episode users that own them (`CREATE USER`, grants on `dbbench\\_%`),
stop their queries (`CONNECTION ADMIN`) and see their tablespaces' sizes (`PROCESS`). It has no
FILE privilege and no rights on other databases; `root@localhost` keeps socket authentication,
i.e. only the OS root may use it.
Each episode gets its own user and database (see `mysql_database.MySQLDatabase`).

Hardening flags: `--local-infile=0` (no `LOAD DATA LOCAL`), `--secure-file-priv` pointing at an
empty directory (no server-side file import or export even with FILE), and
`--enforce-storage-engine=InnoDB` (no `ENGINE=MEMORY` tables sized by a session variable the
agent may raise; every table transactional). Disk: each episode's tables are bounded by the
worker (`mysql_database`, hence PROCESS for its account); what the server writes besides them is
bounded here: one statement's internal on-disk temporary table by `TMP_DISK_TABLE_BYTES` (also
the most a session may raise `tmp_disk_table_size` to, through `--maximum-`), and the temporary
tablespace by `TEMP_TABLESPACE_MAX` (episodes may not create temporary tables; the cap is a
second wall), both under ROOT (`--tmpdir`).
"""

from __future__ import annotations

import argparse
import getpass
import os
import secrets
import shutil
import signal
import subprocess
import time
from pathlib import Path

ADMIN_USER = "dbbench_admin"
DATABASE_PREFIX = "dbbench_"     # every episode database and user name starts with it
_START_TIMEOUT_S = 120.0
TMP_DISK_TABLE_BYTES = 256 * 2**20
TEMP_TABLESPACE_MAX = "1G"


def _binary(*names: str) -> str | None:
    for name in names:
        if found := shutil.which(name, path="/usr/sbin:/usr/bin:" + os.environ.get("PATH", "")):
            return found
    return None


SERVER = _binary("mariadbd", "mysqld")
INSTALL_DB = _binary("mariadb-install-db", "mysql_install_db")


def server_user() -> str:
    """The OS user the server runs as: `mysql` when started by root, else the caller."""
    return "mysql" if os.geteuid() == 0 else getpass.getuser()


class MariaDBServer:
    """`with MariaDBServer(root) as server: server.admin_url` (stops the server on exit)."""

    def __init__(self, root: str | Path) -> None:
        if not (SERVER and INSTALL_DB):
            raise FileNotFoundError("MariaDB server binaries not found "
                                    "(Debian: apt-get install mariadb-server)")
        self.root = Path(root)
        self.socket = self.root / "mysqld.sock"   # a socket path must stay under ~100 bytes
        self.user = server_user()
        self.admin_url = ""
        self._process: subprocess.Popen | None = None

    def __enter__(self) -> MariaDBServer:
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def start(self) -> None:
        data = self.root / "data"
        (self.root / "files").mkdir(parents=True, exist_ok=True)   # secure-file-priv: empty
        (self.root / "tmp").mkdir(exist_ok=True)
        if os.geteuid() == 0:
            shutil.chown(self.root, self.user, self.user)
        if not data.exists():
            subprocess.run([INSTALL_DB, "--no-defaults", f"--datadir={data}", "--skip-test-db",
                            "--auth-root-authentication-method=socket", f"--user={self.user}"],
                           check=True, capture_output=True)
        if os.geteuid() == 0:
            subprocess.run(["chown", "-R", f"{self.user}:{self.user}", str(self.root)],
                           check=True)
        self._process = subprocess.Popen(
            [SERVER, "--no-defaults", f"--datadir={data}", f"--socket={self.socket}",
             "--skip-networking", "--skip-log-bin", f"--pid-file={self.root}/mysqld.pid",
             f"--user={self.user}", "--local-infile=0", f"--secure-file-priv={self.root}/files",
             "--enforce-storage-engine=InnoDB", f"--tmpdir={self.root}/tmp",
             f"--tmp-disk-table-size={TMP_DISK_TABLE_BYTES}",
             f"--maximum-tmp-disk-table-size={TMP_DISK_TABLE_BYTES}",
             f"--innodb-temp-data-file-path=ibtmp1:12M:autoextend:max:{TEMP_TABLESPACE_MAX}"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self._wait_until_ready()
        self.admin_url = self._create_admin()

    def stop(self) -> None:
        if self._process is not None and self._process.poll() is None:
            self._process.send_signal(signal.SIGTERM)
            self._process.wait(timeout=60)

    def wait(self) -> None:
        """Blocks until the server exits."""
        if self._process is not None:
            self._process.wait()

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process else None

    def connect_as_owner(self):
        """A connection as the server's all-powerful socket user (OS root, or the caller)."""
        import pymysql

        return pymysql.connect(unix_socket=str(self.socket), user=getpass.getuser(),
                               autocommit=True)

    def _wait_until_ready(self) -> None:
        import pymysql

        deadline = time.monotonic() + _START_TIMEOUT_S
        while True:
            try:
                self.connect_as_owner().close()
                return
            except pymysql.err.OperationalError:
                if self._process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("MariaDB did not start") from None
                time.sleep(0.2)

    def _create_admin(self) -> str:
        """(Re)creates the worker's account with a fresh password; returns the worker's URL."""
        password = secrets.token_urlsafe(18)
        owner = self.connect_as_owner()
        try:
            with owner.cursor() as cursor:
                cursor.execute(f"DROP USER IF EXISTS '{ADMIN_USER}'@'localhost'")
                cursor.execute(f"CREATE USER '{ADMIN_USER}'@'localhost' IDENTIFIED BY %s",
                               (password,))
                cursor.execute("GRANT ALL PRIVILEGES ON `dbbench\\_%`.* "
                               f"TO '{ADMIN_USER}'@'localhost' WITH GRANT OPTION")
                cursor.execute(f"GRANT CREATE USER, CONNECTION ADMIN, PROCESS ON *.* "
                               f"TO '{ADMIN_USER}'@'localhost'")
        finally:
            owner.close()
        return f"mysql://{ADMIN_USER}:{password}@localhost?unix_socket={self.socket}"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m environments.db.mariadb_server",
                                     description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--root", required=True, help="folder for the data and the socket")
    args = parser.parse_args(argv)
    with MariaDBServer(args.root) as server:
        print(f"serving as OS user {server.user}; DB worker backend URL:\n{server.admin_url}",
              flush=True)
        try:
            server.wait()
        except KeyboardInterrupt:
            pass


if __name__ == "__main__":
    main()
