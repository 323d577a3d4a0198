"""Secrets at rest: URL credentials are sealed (encrypted) before they touch a row or a message.

A user may ask Boxcar to archive ``http://user:password@host/private/``. The capture needs the
password, but DESIGN.md rule 7 says no secret lands in rows, files, logs or spans. So the
userinfo is taken out of the URL where it enters (``Seed.parse``) and kept only as a Fernet token
(AES-128-CBC + HMAC-SHA256, ``cryptography``): ingest seals it, the Crawl and Snapshot rows and
the task messages carry the token, and the hook-executor unseals it just before it starts the
hooks (and redacts it from everything it reports, ``redact``).

The key is ``SECRET_KEY`` from the environment (any string; it is stretched with SHA-256), else
a random key generated once into ``DATA_DIR/.boxcar/secret_key`` (mode 0600), which every
service on the same data dir shares (Compose mounts one volume everywhere).
"""

from __future__ import annotations

import base64
import functools
import hashlib
import os
from collections.abc import Mapping
from pathlib import Path

from cryptography.fernet import Fernet, InvalidToken

from boxcar.shared.settings import get_settings

KEY_FILE = ".boxcar/secret_key"
REDACTED = "***"

#: Boxcar's own secrets in the environment: the database and NATS URLs (they may hold passwords),
#: the CLI's API token, Postgres' password, the sealing key, tracing headers (they may hold an
#: API key), S3 credentials. No process Boxcar starts for outside code — hooks, binary installs
#: (npm and pip run packages' install scripts), bundlers — gets them (``public_environ``).
PRIVATE_ENV_KEYS = frozenset(
    {
        "DATABASE_URL",
        "NATS_URL",
        "BOXCAR_API_TOKEN",
        "PGPASSWORD",
        "SECRET_KEY",
        "OTEL_EXPORTER_OTLP_HEADERS",
        "OTEL_EXPORTER_OTLP_TRACES_HEADERS",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_SESSION_TOKEN",
    }
)


def public_environ(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """``environ`` (default ``os.environ``) without ``PRIVATE_ENV_KEYS``: the environment of every
    process Boxcar starts that runs code from outside (hooks, installs, bundlers)."""
    source = os.environ if environ is None else environ
    return {k: v for k, v in source.items() if k.upper() not in PRIVATE_ENV_KEYS}


class SecretUnavailable(Exception):
    """A sealed value cannot be opened (another key, or a damaged token)."""


def _fernet_key(material: str) -> bytes:
    return base64.urlsafe_b64encode(hashlib.sha256(material.encode("utf-8")).digest())


def key_material(data_dir: Path, configured: str = "") -> str:
    """The secret key: ``configured`` (``SECRET_KEY``) when set, else the data dir's key file,
    created with 256 random bits on first use."""
    if configured:
        return configured
    path = data_dir / KEY_FILE
    try:
        return path.read_text().strip()
    except FileNotFoundError:
        pass
    path.parent.mkdir(parents=True, exist_ok=True)
    material = base64.urlsafe_b64encode(os.urandom(32)).decode()
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:  # another service created it first
        return path.read_text().strip()
    with os.fdopen(fd, "w") as fh:
        fh.write(material + "\n")
    return material


@functools.cache
def _box() -> Fernet:
    settings = get_settings()
    return Fernet(_fernet_key(key_material(settings.data_dir, settings.secret_key)))


def seal(value: str) -> str:
    """Encrypt ``value``; returns a URL-safe token (empty for an empty value)."""
    return _box().encrypt(value.encode("utf-8")).decode("ascii") if value else ""


def unseal(token: str) -> str:
    """Decrypt a ``seal`` token ("" stays "").

    Raises:
        SecretUnavailable: the token was sealed with another key or is damaged.
    """
    if not token:
        return ""
    try:
        return _box().decrypt(token.encode("ascii")).decode("utf-8")
    except (InvalidToken, ValueError) as exc:
        raise SecretUnavailable("sealed credentials cannot be opened (was SECRET_KEY changed?)") from exc


def secret_parts(userinfo: str) -> list[str]:
    """The strings to scrub for a URL's userinfo: the password as written and percent-decoded
    (a user name alone is not secret)."""
    from urllib.parse import unquote

    _, _, password = userinfo.partition(":")
    return [p for p in dict.fromkeys((password, unquote(password))) if len(p) >= 3]


def redact(text: str, secrets: list[str]) -> str:
    """``text`` with every occurrence of each secret replaced by ``***``."""
    for secret in secrets:
        if secret and secret in text:
            text = text.replace(secret, REDACTED)
    return text
