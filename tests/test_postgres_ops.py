"""Postgres as an operator runs it (issue 32): DATABASE_URL as libpq takes it, against real
clusters of the test's own — TLS with a certificate checked against the operator's CA, and a
primary with a streaming standby, the URL naming both with ``target_session_attrs=read-write``,
through a failover (the primary stopped, the standby promoted)."""

from __future__ import annotations

import contextlib
import datetime
import ipaddress
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from sqlalchemy import text
from sqlalchemy.exc import OperationalError

from boxcar.shared.db import Database
from boxcar.shared.settings import Settings
from tests.helpers import wait_until
from tests.private_postgres import PrivatePostgres


def _certificates(folder: Path) -> tuple[Path, Path, Path, Path]:
    """A CA, a server certificate it signed for 127.0.0.1/localhost, the server's key (owned by
    ``postgres``, mode 0600 as the server requires), and a second CA that signed nothing."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = datetime.datetime.now(datetime.UTC)

    def name(common: str) -> x509.Name:
        return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common)])

    def ca(common: str) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
        key = ec.generate_private_key(ec.SECP256R1())
        cert = (
            x509.CertificateBuilder()
            .subject_name(name(common))
            .issuer_name(name(common))
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256())
        )
        return key, cert

    ca_key, ca_cert = ca("boxcar test CA")
    _other_key, other_cert = ca("some other CA")
    server_key = ec.generate_private_key(ec.SECP256R1())
    server_cert = (
        x509.CertificateBuilder()
        .subject_name(name("localhost"))
        .issuer_name(ca_cert.subject)
        .public_key(server_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())
    )
    paths = [folder / n for n in ("ca.pem", "server.pem", "server.key", "other-ca.pem")]
    paths[0].write_bytes(ca_cert.public_bytes(serialization.Encoding.PEM))
    paths[1].write_bytes(server_cert.public_bytes(serialization.Encoding.PEM))
    paths[2].write_bytes(
        server_key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    paths[3].write_bytes(other_cert.public_bytes(serialization.Encoding.PEM))
    for path in paths:
        shutil.chown(path, "postgres", "postgres")
    os.chmod(paths[2], 0o600)
    return paths[0], paths[1], paths[2], paths[3]


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
