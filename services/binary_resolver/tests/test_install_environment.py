"""An install runs registry code (an npm package's postinstall script, here a real one from a local
tarball): it must not see Boxcar's secrets, although the resolver's own environment holds them."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from boxcar.binary_resolver.resolver import resolve_binary
from boxcar.shared.messages import BinaryRequest
from boxcar.shared.secrets import PRIVATE_ENV_KEYS

PACKAGE = {
    "name": "boxcar-envprobe",
    "version": "1.0.0",
    "bin": {"boxcar-envprobe": "probe.js"},
    "scripts": {"postinstall": "node probe.js --dump"},
}
PROBE = """#!/usr/bin/env node
if (process.argv.includes("--dump")) {
  require("fs").writeFileSync(process.env.BOXCAR_ENVPROBE_DUMP, JSON.stringify(process.env));
} else { console.log("boxcar-envprobe 1.0.0"); }
"""


@pytest.fixture
def probe_package(tmp_path: Path) -> Path:
    if shutil.which("npm") is None:
        pytest.skip("npm is not installed (make install puts it there)")
    source = tmp_path / "pkg"
    source.mkdir()
    (source / "package.json").write_text(json.dumps(PACKAGE))
    (source / "probe.js").write_text(PROBE)
    (source / "probe.js").chmod(0o755)
    subprocess.run(["npm", "pack", str(source)], cwd=tmp_path, check=True, capture_output=True, timeout=120)
    return tmp_path / "boxcar-envprobe-1.0.0.tgz"


def test_no_secret_reaches_an_install_script(probe_package, tmp_path, monkeypatch):
    dump = tmp_path / "environment.json"
    secrets = {key: f"secret-{i}-never-leaked" for i, key in enumerate(sorted(PRIVATE_ENV_KEYS))}
    for key, value in secrets.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("BOXCAR_ENVPROBE_DUMP", str(dump))
    request = BinaryRequest(
        name="boxcar-envprobe",
        binproviders="npm",
        overrides={"npm": {"install_args": [str(probe_package)]}},
        postinstall_scripts=True,
    )
    reply = resolve_binary(request, tmp_path / "lib", ["npm"], "test-machine")
    assert reply.ok and reply.installed, reply.error
    seen = json.loads(dump.read_text())  # the install script ran, and wrote what it was given
    assert seen["BOXCAR_ENVPROBE_DUMP"] == str(dump)
    leaked = {key for key in secrets if key in seen} | {k for k, v in seen.items() if v in secrets.values()}
    assert not leaked, f"an install script saw {sorted(leaked)}"
