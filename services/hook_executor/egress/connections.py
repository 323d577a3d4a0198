"""Where the egress proxy connected, kept for the records that need it (a WARC's
``WARC-IP-Address``: wget, behind the proxy, only ever sees the proxy's address)."""

from __future__ import annotations

import json
import os
from pathlib import Path

CONNECTIONS_ENV = "BOXCAR_EGRESS_CONNECTIONS"


class ConnectionLog:
    """The egress proxy's record of where it connected: one JSON line per upstream connection
    (``{"t": unix seconds, "host", "port", "ip"}``), appended by the proxy, kept under
    ``MAX_BYTES`` by moving the full file to ``<name>.1``.

    Args:
        path: the log file (``EgressProxy.connections``).
    """

    MAX_BYTES = 4 * 1024 * 1024

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)

    def append(self, host: str, port: int, ip: str, when: float) -> None:
        """Record one connection (one ``O_APPEND`` write: lines never interleave)."""
        line = json.dumps({"t": round(when, 3), "host": host.lower(), "port": port, "ip": ip}) + "\n"
        try:
            if self.path.stat().st_size > self.MAX_BYTES:
                os.replace(self.path, self.path.with_name(self.path.name + ".1"))
        except OSError:
            pass
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            os.write(fd, line.encode())
        finally:
            os.close(fd)

    def addresses(self, since: float) -> dict[tuple[str, int], str]:
        """``{(host, port): ip}`` of the connections made since ``since`` (the latest one wins)."""
        out: dict[tuple[str, int], str] = {}
        for path in (self.path.with_name(self.path.name + ".1"), self.path):
            try:
                lines = path.read_text(errors="replace").splitlines()
            except OSError:
                continue
            for line in lines:
                try:
                    entry = json.loads(line)
                    if entry["t"] >= since:
                        out[(entry["host"], int(entry["port"]))] = entry["ip"]
                except (ValueError, KeyError, TypeError):
                    continue
        return out
