"""Postgres as an operator runs it (issue 32): DATABASE_URL as libpq takes it, against real
clusters of the test's own — TLS with a certificate checked against the operator's CA, and a
primary with a streaming standby, the URL naming both with ``target_session_attrs=read-write``,
through a failover (the primary stopped, the standby promoted)."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from sqlalchemy import text
from sqlalchemy.exc import OperationalError

from boxcar.shared.db import Database
from boxcar.shared.settings import Settings
from tests.helpers import tls_files, wait_until
from tests.private_postgres import PrivatePostgres


def _certificates(folder: Path) -> tuple[Path, Path, Path, Path]:
    """``tls_files`` owned by ``postgres``, the key mode 0600 (as the server requires)."""
    paths = tls_files(folder)
    for path in paths:
        shutil.chown(path, "postgres", "postgres")
    os.chmod(paths[2], 0o600)
    return paths


def test_tls_with_the_operators_ca_is_used_and_a_wrong_ca_is_refused(tmp_path):
    postgres = PrivatePostgres(tmp_path)
    ca, cert, key, other_ca = _certificates(postgres.dir)
    postgres.options = f"-c ssl=on -c ssl_cert_file={cert} -c ssl_key_file={key}"
    postgres.start()
    try:
        base = f"postgresql://postgres@127.0.0.1:{postgres.port}/postgres?sslmode=verify-full"
        db = Database.for_settings(Settings(database_url=f"{base}&sslrootcert={ca}"))
        db.upgrade()  # the schema, over TLS
        with db.read() as s:
            used = s.scalar(text("SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()"))
            assert used is True
            assert s.scalar(text("SELECT count(*) FROM crawl")) == 0
        db.engine.dispose()
        wrong = Database.for_settings(Settings(database_url=f"{base}&sslrootcert={other_ca}"))
        with pytest.raises(OperationalError, match="certificate verify failed"), wrong.read() as s:
            s.execute(text("SELECT 1"))
        wrong.engine.dispose()
    finally:
        postgres.stop()
        postgres.remove()


def test_the_url_with_both_hosts_follows_a_failover_to_the_promoted_standby(tmp_path):
    primary = PrivatePostgres(tmp_path)
    primary.start()
    standby = None
    try:
        standby = PrivatePostgres(tmp_path, standby_of=primary)
        standby.start()
        # the standby first: libpq skips it while it is read-only
        hosts = f"127.0.0.1:{standby.port},127.0.0.1:{primary.port}"
        settings = Settings(
            database_url=f"postgresql://postgres@{hosts}/postgres?target_session_attrs=read-write&connect_timeout=5"
        )
        db = Database.for_settings(settings)
        db.upgrade()

        def where() -> tuple[int, bool]:
            with db.write() as s:
                s.execute(text("CREATE TABLE IF NOT EXISTS failover_probe (id text PRIMARY KEY)"))
                s.execute(text("INSERT INTO failover_probe VALUES (:i)"), {"i": os.urandom(8).hex()})
                return s.scalar(text("SELECT inet_server_port()")), s.scalar(text("SELECT pg_is_in_recovery()"))

        assert where() == (primary.port, False)
        sent = Database(primary.url)
        with sent.read() as s:
            lsn = s.scalar(text("SELECT pg_current_wal_lsn()::text"))
        sent.engine.dispose()
        replica = Database(standby.url)

        def replayed() -> bool:
            with replica.read() as s:
                return bool(s.scalar(text("SELECT pg_last_wal_replay_lsn() >= CAST(:l AS pg_lsn)"), {"l": lsn}))

        wait_until(replayed, 30, "the standby to replay the primary's writes")
        replica.engine.dispose()
        primary.stop()
        standby.promote()
        # the same Database, its pooled connection to the old primary dead: pool_pre_ping reconnects
        # and libpq takes the first host that now accepts writes
        assert where() == (standby.port, False)
        with db.read() as s:
            assert s.scalar(text("SELECT count(*) FROM failover_probe")) == 2  # the first write came across
            assert s.scalar(text("SELECT count(*) FROM crawl")) == 0  # and the schema
        db.engine.dispose()
    finally:
        for cluster in (standby, primary):
            if cluster is not None:
                with contextlib.suppress(subprocess.CalledProcessError):  # already stopped
                    cluster.stop()
                cluster.remove()
