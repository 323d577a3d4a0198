"""A Postgres cluster of a test's own, run as the ``postgres`` user from the Debian server
binaries: stoppable (outages), with TLS (a certificate the test made), or a streaming-replication
standby of another (failover)."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from boxcar.cli.stack import free_port, wait_for_port


class PrivatePostgres:
    """A Postgres cluster of the test's own (stoppable), run as the ``postgres`` user; with
    ``standby_of`` a streaming-replication standby of that (running) cluster; ``options`` are more
    ``postgres`` command-line options (``-c ssl=on ...``)."""

    def __init__(self, root: Path, standby_of: PrivatePostgres | None = None, options: str = "") -> None:
        bins = sorted(Path("/usr/lib/postgresql").glob("*/bin"))
        if not bins or shutil.which("runuser") is None:
            pytest.skip("no Postgres server binaries (postgresql package) to start a private cluster")
        # a directory the postgres user can reach (pytest's tmp dirs are root's own)
        self.bin, self.dir, self.port = bins[-1], Path(tempfile.mkdtemp(prefix="boxcar-pg-")), free_port()
        self.options = options
        shutil.chown(self.dir, "postgres", "postgres")
        if standby_of is None:
            self._as_postgres(str(self.bin / "initdb"), "-D", str(self.dir / "data"), "-A", "trust", "-U", "postgres")
        else:  # a copy of the running primary that follows it (standby.signal, primary_conninfo)
            self._as_postgres(
                str(self.bin / "pg_basebackup"),
                *("-h", "127.0.0.1", "-p", str(standby_of.port), "-U", "postgres"),
                *("-D", str(self.dir / "data"), "-R", "-X", "stream"),
            )

    def _as_postgres(self, *argv: str) -> None:
        # no pipes: the server pg_ctl starts would hold them open
        subprocess.run(
            ["runuser", "-u", "postgres", "--", *argv],
            check=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            timeout=120,
        )

    @property
    def url(self) -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/postgres"

    def start(self) -> None:
        options = f"-p {self.port} -k {self.dir} -c listen_addresses=127.0.0.1 {self.options}"
        log = str(self.dir / "server.log")
        self._as_postgres(
            str(self.bin / "pg_ctl"), "-D", str(self.dir / "data"), "-o", options, "-l", log, "-w", "start"
        )
        wait_for_port(self.port, 30)

    def promote(self) -> None:
        """A standby becomes a primary (what a failover does)."""
        self._as_postgres(str(self.bin / "pg_ctl"), "-D", str(self.dir / "data"), "-w", "promote")

    def stop(self) -> None:
        self._as_postgres(str(self.bin / "pg_ctl"), "-D", str(self.dir / "data"), "-m", "fast", "-w", "stop")

    def remove(self) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)
