"""The OpenAPI document matches the server: schemathesis, every check on (status codes, content
types, headers, response schemas, ``Allow``, auth, positive and negative data, stateful links),
against a scratch stack — once with a write token, once with a read-only one. Its configuration
(``tests/schemathesis/schemathesis.toml``) says which default it changes, and why."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from boxcar.ingest.api.auth import create_token
from boxcar.shared.db import Database

CONFIG = Path(__file__).parent / "schemathesis" / "schemathesis.toml"
SCHEMATHESIS = Path(sys.executable).parent / "schemathesis"


@pytest.mark.parametrize("scope", ["write", "read"])
def test_schemathesis_with_every_check_finds_nothing(sqlite_url, nats_url, make_stack, tmp_path, scope):
    stack = make_stack(sqlite_url, nats_url, families=["fetch"], env={"PLUGINS": "wget"})
    token = create_token(Database(sqlite_url), f"schemathesis-{scope}", scope=scope)
    run = subprocess.run(
        [
            str(SCHEMATHESIS),
            "--config-file",
            str(CONFIG),
            "--no-color",
            "run",
            f"{stack.api_url}/schema/openapi.json",
            "--checks",
            "all",
            "--max-examples",
            "40",
            "--seed",
            "20261202",
            "-H",
            f"Authorization: Bearer {token}",
        ],
        capture_output=True,
        text=True,
        timeout=900,
        cwd=tmp_path,
    )
    assert run.returncode == 0, run.stdout[-6000:] + run.stderr[-2000:]
