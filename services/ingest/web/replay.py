"""WARC replay with ReplayWeb.page's embeddable viewer (npm package ``replaywebpage``).

Replay runs the captured page's own scripts, through a service worker, in the origin that serves
the viewer. So the viewer is served only on the archive origin (``ARCHIVE_PORT`` /
``ARCHIVE_ORIGIN``), never on Boxcar's: the snapshot page embeds it in an iframe from there, as
ReplayWeb.page's embedding guide recommends (a separate origin for the archive). Without an
archive origin, replay is not offered. The viewer needs a secure context: HTTPS, or localhost /
127.0.0.1.

The package is AGPL-3.0, so Boxcar does not vendor it: ``boxcar install`` (and the image build)
fetches the pinned package with ``npm pack`` and keeps its bundled ``ui.js`` and ``sw.js`` (and
its licence) in ``<ABXPKG_LIB_DIR>/replay/replaywebpage-<version>`` (``provision``); ingest serves
them from there.
"""

from __future__ import annotations

import shutil
import subprocess
import tarfile
import tempfile
from pathlib import Path

from boxcar.shared.settings import Settings

PACKAGE = "replaywebpage"
VERSION = "2.5.3"
ASSETS = ("ui.js", "sw.js")


def assets_dir(settings: Settings) -> Path:
    """Where the package's files are (they may not be there yet)."""
    return settings.lib_dir / "replay" / f"{PACKAGE}-{VERSION}"


def available(settings: Settings) -> bool:
    """True when ``ui.js`` and ``sw.js`` are installed."""
    folder = assets_dir(settings)
    return all((folder / name).is_file() for name in ASSETS)


def provision(settings: Settings, timeout: float = 300) -> Path:
    """Fetch the pinned package with ``npm pack`` unless it is there; returns its directory.

    Raises:
        RuntimeError: npm is missing or failed (its last output lines in the message).
    """
    folder = assets_dir(settings)
    if available(settings):
        return folder
    npm = shutil.which("npm")
    if npm is None:
        raise RuntimeError("npm not found: install it (Debian: apt-get install npm) to enable WARC replay")
    with tempfile.TemporaryDirectory(dir=settings.lib_dir.parent if settings.lib_dir.exists() else None) as tmp:
        proc = subprocess.run(
            [npm, "pack", "--silent", "--pack-destination", tmp, f"{PACKAGE}@{VERSION}"],
            capture_output=True,
            text=True,
            timeout=timeout,
            cwd=tmp,
        )
        tarballs = list(Path(tmp).glob("*.tgz"))
        if proc.returncode != 0 or not tarballs:
            tail = "\n".join((proc.stderr or proc.stdout).strip().splitlines()[-5:])
            raise RuntimeError(f"npm pack {PACKAGE}@{VERSION} failed: {tail}")
        staging = Path(tmp) / "out"
        staging.mkdir()
        with tarfile.open(tarballs[0]) as tar:
            for name in (*ASSETS, "LICENSE"):
                member = tar.getmember(f"package/{name}")
                source = tar.extractfile(member)
                if source is not None:
                    (staging / name).write_bytes(source.read())
        folder.parent.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(folder, ignore_errors=True)
        shutil.move(str(staging), folder)
    return folder
