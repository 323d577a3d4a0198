"""Helpers for cross-service tests: waiting on conditions, reading the archive."""

from __future__ import annotations

import contextlib
import datetime
import ipaddress
import json
import os
import re
import shutil
import subprocess
import threading
import time
import zlib
from collections.abc import Callable, Iterator
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import psutil
import pytest
from sqlalchemy import select

from boxcar.cli.stack import EmbeddedStack
from boxcar.ingest.web.accounts import create_user
from boxcar.shared.db import Database
from boxcar.shared.db.models import ArchiveResult, Crawl, Snapshot
from boxcar.shared.settings import Settings

INPUTS = Path(os.environ.get("BOXCAR_SHARED_DIR", Path(__file__).resolve().parents[2] / "shared")) / "inputs"


def wait_until[T](check: Callable[[], T], timeout: float, what: str, interval: float = 0.25) -> T:
    """Poll ``check`` until it returns something truthy; fail the test after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(interval)


def hook_processes(crawl_id: str, db: Database) -> list[psutil.Process]:
    """Live processes working for ``crawl_id``: each process whose ``EXTRA_CONTEXT`` names it (a
    cold hook, and whatever a hook starts) and each warm hook of the crawl or its snapshots.

    /proc shows a fork of a zygote the environment the zygote started with, not the one the hook
    runs with, so a warm hook is found otherwise: its command line is its parent's (a fork of a
    ``zygote_server.py``) and its working directory (``<snapshot or crawl dir>/<plugin>``) lies in
    a folder named by the crawl's id or one of its snapshots' (``storage.snapshot_dir``, ``crawl_dir``)."""
    with db.read() as s:
        ids = {crawl_id, *s.scalars(select(Snapshot.id).where(Snapshot.crawl_id == crawl_id))}
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        with contextlib.suppress(psutil.Error, ValueError, OSError):
            if proc.status() == psutil.STATUS_ZOMBIE:
                continue
            context = proc.environ().get("EXTRA_CONTEXT", "")
            if context and json.loads(context).get("crawl_id") == crawl_id:
                found.append(proc)
            elif is_warm_hook(proc) and ids & set(Path(proc.cwd()).parts):
                found.append(proc)
    return found


def describe_processes(procs: list[psutil.Process]) -> list[tuple]:
    """``(pid, the command line's last three items, cwd)`` of each of ``procs`` still running, for a
    test's failure message."""
    out = []
    for proc in procs:
        with contextlib.suppress(psutil.Error):
            out.append((proc.pid, proc.cmdline()[-3:], proc.cwd()))
    return out


def is_warm_hook(proc: psutil.Process) -> bool:
    """True for a program a zygote forked (a warm hook, or a stand-in's program): a process with
    a ``zygote_server.py`` command line whose parent has the same one (a fork keeps its argv).
    ``proc`` comes from ``psutil.process_iter(["cmdline"])``: its command line is read already."""
    cmdline = proc.info["cmdline"] or []
    if any(arg.endswith("zygote_server.py") for arg in cmdline):
        with contextlib.suppress(psutil.Error):
            parent = proc.parent()
            return parent is not None and parent.cmdline() == cmdline
    return False


def api(stack) -> httpx.Client:
    """An HTTP client of a stack's API, with the stack's token."""
    return httpx.Client(base_url=stack.api_url, headers={"Authorization": f"Bearer {stack.token}"}, timeout=30)


def submit(stack, **payload) -> str:
    """POST a crawl to a stack and return its id."""
    response = api(stack).post("/api/v1/crawls", json=payload)
    assert response.status_code == 201, response.text
    return response.json()["id"]


def wait_sealed(stack, crawl_id: str, timeout: float = 300) -> dict:
    """Wait until the crawl is sealed and every reported result is projected."""
    client = api(stack)

    def done():
        state = client.get(f"/api/v1/crawls/{crawl_id}").json()
        return state if state["status"] == "sealed" and state.get("results_pending") == 0 else None

    return wait_until(done, timeout, f"crawl {crawl_id} to seal")


def load_crawl(db: Database, crawl_id: str) -> tuple[Crawl, list[Snapshot], list[ArchiveResult]]:
    with db.read() as s:
        crawl = s.get(Crawl, crawl_id)
        snaps = list(s.scalars(select(Snapshot).where(Snapshot.crawl_id == crawl_id)))
        results = list(s.scalars(select(ArchiveResult).where(ArchiveResult.snapshot_id.in_([x.id for x in snaps]))))
    return crawl, snaps, results


class _RangeHandler(SimpleHTTPRequestHandler):
    """The standard library's file handler with single byte ranges (RFC 9110 §14), which
    ReplayWeb.page uses to read a WACZ a piece at a time."""

    def log_message(self, *args) -> None:
        pass

    def end_headers(self) -> None:
        self.send_header("Accept-Ranges", "bytes")
        super().end_headers()

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        wanted = re.fullmatch(r"bytes=(\d*)-(\d*)", self.headers.get("Range", "").strip())
        path = Path(self.translate_path(self.path))
        if wanted is None or not path.is_file() or wanted[0] == "bytes=-":
            return super().do_GET()
        size = path.stat().st_size
        if wanted[1]:
            first, last = int(wanted[1]), min(int(wanted[2]) if wanted[2] else size - 1, size - 1)
        else:
            first, last = max(0, size - int(wanted[2])), size - 1
        if first > last:
            self.send_response(416)
            self.send_header("Content-Range", f"bytes */{size}")
            self.end_headers()
            return None
        self.send_response(206)
        self.send_header("Content-Type", self.guess_type(str(path)))
        self.send_header("Content-Range", f"bytes {first}-{last}/{size}")
        self.send_header("Content-Length", str(last - first + 1))
        self.end_headers()
        with path.open("rb") as fh:
            fh.seek(first)
            self.wfile.write(fh.read(last - first + 1))
        return None


@contextlib.contextmanager
def serve_directory(root: Path) -> Iterator[str]:
    """A local HTTP server of ``root``'s files (byte ranges too) on a free loopback port; yields
    its base URL."""
    handler = partial(_RangeHandler, directory=str(root))
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()


@contextlib.contextmanager
def ui_stack(
    data_dir: Path,
    lib_dir: Path,
    plugins: str,
    user: tuple[str, str],
    prepare: Callable[[Settings], None] | None = None,
) -> Iterator[EmbeddedStack]:
    """An embedded stack (SQLite, its own NATS) for browser tests: local pages allowed, the given
    ``PLUGINS``, a web UI user ``(name, password)``; ``prepare`` runs on its settings first."""
    with pytest.MonkeyPatch.context() as env:
        for key in ("DATABASE_URL", "NATS_URL", "PUBLIC_READS", "ARCHIVE_PORT", "ARCHIVE_SECURITY_MODE"):
            env.delenv(key, raising=False)
        env.setenv("ABXPKG_LIB_DIR", str(lib_dir))
        env.setenv("URL_ALLOW_PRIVATE", "true")  # test sites are on 127.0.0.1
        env.setenv("PLUGINS", plugins)
        settings = Settings(data_dir=data_dir)
        if prepare is not None:
            prepare(settings)
        db = Database(settings.sqlalchemy_url)
        db.upgrade()
        create_user(db, *user, role="admin")
        db.dispose()
        stack = EmbeddedStack(settings)
        stack.start(timeout=120)
        try:
            yield stack
        finally:
            stack.stop(grace=20)


def provision_replay(settings: Settings) -> None:
    """ReplayWeb.page's files for a test stack (``boxcar install`` fetches them with npm); the
    test fails, never skips, when they cannot be had."""
    from boxcar.ingest.web import replay

    try:
        replay.provision(settings)
    except RuntimeError as exc:
        pytest.fail(f"ReplayWeb.page's files could not be fetched: {exc}")


def npm_tool(package: str, version: str, path: str) -> Path:
    """A file of an npm package (``path`` inside it), installed once into the checkout's
    ``.cache/<package>`` (web-ext, axe-core: test tools, never shipped)."""
    root = Path(__file__).resolve().parents[1] / ".cache" / package
    target = root / "node_modules" / package / path
    if not target.exists():
        npm = shutil.which("npm")
        assert npm, f"npm is needed for {package} (make system-deps installs it)"
        subprocess.run(
            [npm, "install", "--silent", "--no-audit", "--no-fund", "--prefix", str(root), f"{package}@{version}"],
            check=True,
            timeout=600,
        )
    return target


#: Debian's Chromium, which Playwright drives (browser downloads are blocked here)
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"


@contextlib.contextmanager
def chromium_browser() -> Iterator:
    """A headless Playwright ``Browser`` on Debian's Chromium (``CHROMIUM``)."""
    from playwright import sync_api

    with sync_api.sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=CHROMIUM, headless=True)
        try:
            yield chromium
        finally:
            chromium.close()


def assert_one_gzip_member_per_record(path: Path) -> None:
    """The WARC at ``path`` is its records back to back, each a gzip member of its own (WARC 1.1,
    annex D: so a reader can seek to a record); AssertionError naming the offset otherwise."""
    from warcio.archiveiterator import ArchiveIterator

    data = path.read_bytes()
    with open(path, "rb") as fh:
        iterator = ArchiveIterator(fh)
        spans = [(iterator.get_record_offset(), iterator.get_record_length()) for _ in iterator]
    assert spans[0][0] == 0 and spans[-1][0] + spans[-1][1] == len(data)
    assert all(a + n == b for (a, n), (b, _) in zip(spans, spans[1:], strict=False)), spans  # back to back
    for offset, length in spans:
        member = zlib.decompressobj(zlib.MAX_WBITS + 16)
        assert member.decompress(data[offset : offset + length]).startswith(b"WARC/1.")
        assert member.eof and member.unused_data == b"", (path.name, offset)


def tls_files(folder: Path) -> tuple[Path, Path, Path, Path]:
    """PEM files in ``folder``: a CA, a server certificate it signed for 127.0.0.1 and localhost
    (valid for a day), the server's unencrypted key, and a second CA that signed nothing."""
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
    return paths[0], paths[1], paths[2], paths[3]
