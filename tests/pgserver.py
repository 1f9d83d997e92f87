"""A real PostgreSQL server for the tests, in a directory of its own under /tmp: initdb, start on a
private port and socket directory, stop. Run as the `postgres` user when the tests run as root
(initdb refuses root).

    python -m tests.pgserver start DIR     # .ci/run: prints the URL, leaves it running
    python -m tests.pgserver stop DIR

`Server.find()` is the server .ci/run started (SPILLGUARD_TEST_POSTGRES names its directory),
else None. The fixtures are in tests/pg_fixtures.py.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import socket
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

ENV_DIR = "SPILLGUARD_TEST_POSTGRES"
REQUIRE = "SPILLGUARD_REQUIRE_POSTGRES"
USER = "postgres"  # the database superuser initdb makes


def binaries() -> Path | None:
    """The directory holding initdb and pg_ctl: on PATH, or Debian's newest version."""
    found = shutil.which("pg_ctl")
    if found and shutil.which("initdb"):
        return Path(found).resolve().parent
    versions = sorted(
        glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"),
        key=lambda p: int(Path(p).parent.parent.name),
    )
    return Path(versions[-1]).parent if versions else None


def required() -> bool:
    return os.environ.get(REQUIRE) == "1"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass
class Server:
    root: Path  # holds data/, the socket, the log and the port

    @property
    def data(self) -> Path:
        return self.root / "data"

    @property
    def port(self) -> int:
        return int((self.root / "port").read_text())

    def url(self, dbname: str = "postgres", user: str = USER, password: str = "") -> str:
        secret = f":{password}" if password else ""
        return f"postgresql://{user}{secret}@127.0.0.1:{self.port}/{dbname}"

    @classmethod
    def find(cls) -> Server | None:
        given = os.environ.get(ENV_DIR)
        return cls(Path(given)) if given and (Path(given) / "port").is_file() else None

    @classmethod
    def create(cls, root: Path | None = None) -> Server:
        """A new, stopped cluster (trust authentication on 127.0.0.1 and its socket only)."""
        root = root or Path(tempfile.mkdtemp(prefix="spillguard-pg-", dir="/tmp"))
        root.mkdir(parents=True, exist_ok=True)
        server = cls(root)
        server._own(root)
        server._run("initdb", "-D", str(server.data), "-U", USER, "-A", "trust", "-E", "UTF8")
        (root / "port").write_text(str(_free_port()))
        return server

    def start(self) -> None:
        options = f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 -c fsync=off"
        log = str(self.root / "log")
        self._run("pg_ctl", "-D", str(self.data), "-o", options, "-l", log, "-w", "start")

    def stop(self) -> None:
        self._run("pg_ctl", "-D", str(self.data), "-m", "fast", "-w", "stop")

    def restart(self) -> None:
        self.stop()
        self.start()

    def running(self) -> bool:
        done = subprocess.run(
            self._as_owner("pg_ctl", "-D", str(self.data), "status"),
            capture_output=True,
            check=False,
        )
        return done.returncode == 0

    def remove(self) -> None:
        if self.running():
            self.stop()
        shutil.rmtree(self.root, ignore_errors=True)

    def _run(self, *argv: str) -> None:
        done = subprocess.run(self._as_owner(*argv), capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"{argv[0]} failed: {done.stdout}{done.stderr}")

    def _as_owner(self, program: str, *args: str) -> list[str]:
        where = binaries()
        if where is None:
            raise RuntimeError("no PostgreSQL binaries (initdb, pg_ctl)")
        argv = [str(where / program), *args]
        return ["runuser", "-u", USER, "--", *argv] if os.geteuid() == 0 else argv

    def _own(self, root: Path) -> None:
        if os.geteuid() == 0:
            user = pwd.getpwnam(USER)
            os.chown(root, user.pw_uid, user.pw_gid)


def database(server: Server) -> Iterator[str]:
    """A fresh, empty database on `server` for one test: its URL."""
    import psycopg

    name = f"t_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(server.url(), autocommit=True) as admin:
        admin.execute(f"CREATE DATABASE {name}")
    try:
        yield server.url(name)
    finally:
        if server.running():
            with psycopg.connect(server.url(), autocommit=True) as admin:
                admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def usable() -> bool:
    """The binaries are there, and a user to run them as."""
    if binaries() is None:
        return False
    try:
        return os.geteuid() != 0 or bool(pwd.getpwnam(USER))
    except KeyError:
        return False


def main(argv: list[str]) -> int:
    action, root = argv
    if action == "start":
        server = Server.create(Path(root))
        server.start()
        print(server.url())
    elif action == "stop":
        server = Server(Path(root))
        if server.data.is_dir():
            server.remove()
    else:
        print(f"unknown action {action!r}: start or stop", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
