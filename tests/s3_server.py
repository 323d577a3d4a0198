"""A real S3 API server for tests: moto's server mode (``moto_server``), from PyPI.

MinIO's and Garage's servers cannot be had from the registries here; moto's can. It is installed
once into its own virtualenv (``~/.cache/boxcar/moto-server``: moto's botocore wants a
python-dateutil older than Boxcar's), never into Boxcar's. What it does not prove about MinIO or
Garage: their consistency under concurrent writers, their multipart limits and error bodies, and
their performance; moto keeps objects in memory and answers every signed request.
"""

from __future__ import annotations

import os
import subprocess
import sys
import urllib.request
from pathlib import Path

from boxcar.cli.stack import free_port, wait_for_port

MOTO_SPEC = "moto[server]==5.2.5"
VENV = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "boxcar" / "moto-server"
#: what the server accepts for any request (moto checks signatures' form, not the keys)
CREDENTIALS = {"AWS_ACCESS_KEY_ID": "boxcar-test", "AWS_SECRET_ACCESS_KEY": "boxcar-test-secret"}


def moto_server_binary() -> str:
    """``moto_server`` from its own venv, installed there on first use (about 30 s)."""
    binary = VENV / "bin" / "moto_server"
    if not binary.exists():
        subprocess.run([sys.executable, "-m", "venv", "--clear", str(VENV)], check=True)
        subprocess.run(
            [str(VENV / "bin" / "pip"), "install", "--quiet", "--disable-pip-version-check", MOTO_SPEC],
            check=True,
            timeout=600,
        )
    return str(binary)


class S3Server:
    """One ``moto_server`` on a free loopback port; ``endpoint`` is its URL. Stoppable and
    startable again on the same port (a store outage); its objects do not survive a stop."""

    def __init__(self) -> None:
        self.port = free_port()
        self.proc: subprocess.Popen | None = None

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        self.proc = subprocess.Popen(
            [moto_server_binary(), "-H", "127.0.0.1", "-p", str(self.port)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        wait_for_port(self.port, 60, self.proc)

    def create_bucket(self, name: str) -> None:
        """``PUT /<name>`` (path style; moto takes it unsigned)."""
        urllib.request.urlopen(urllib.request.Request(f"{self.endpoint}/{name}", method="PUT"), timeout=10).close()

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(10)
