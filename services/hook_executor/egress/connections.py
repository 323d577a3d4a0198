"""Where the egress proxy connected, kept for the records that need it (a WARC's
``WARC-IP-Address``: wget, behind the proxy, only ever sees the proxy's address)."""

from __future__ import annotations

import json
import os
import threading
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
    #: how long a (host, port)'s latest connection is kept (the browser's WARC looks back 15 min)
    KEEP_S = 3600.0

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()
        self._latest: dict[tuple[str, int], tuple[float, str]] = {}  # (host, port) → (t, ip)
        self._inode: int | None = None  # the file read so far, and how far
        self._offset = 0

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
        """``{(host, port): ip}`` of the connections made since ``since`` (unix seconds; the latest
        one wins).

        Reads only what was appended since the last call (the proxy's log reaches ``MAX_BYTES``
        twice over, ~100,000 lines: parsing it whole for every task was a quarter of the
        one-process stack's CPU in a long no-browser import), keeping each (host, port)'s latest
        connection for ``KEEP_S``. Thread-safe (executors call it from worker threads)."""
        with self._lock:
            self._catch_up()
            return {key: ip for key, (t, ip) in self._latest.items() if t >= since}

    def _catch_up(self) -> None:
        rotated = self.path.with_name(self.path.name + ".1")
        if self._inode is None:  # first call: what the rotated file holds, then the current one
            self._read(rotated, None, 0)
        try:
            current = os.stat(self.path).st_ino
        except OSError:
            current = None
        if self._inode is not None and current != self._inode:  # rotated since: finish the old file
            self._read(rotated, self._inode, self._offset)
            self._inode, self._offset = None, 0
        if current is not None:
            self._offset = self._read(self.path, current, self._offset if self._inode == current else 0)
            self._inode = current
        if len(self._latest) > 1000:
            oldest = max(t for t, _ in self._latest.values()) - self.KEEP_S
            self._latest = {key: v for key, v in self._latest.items() if v[0] >= oldest}

    def _read(self, path: Path, inode: int | None, offset: int) -> int:
        """Parse ``path``'s complete lines from ``offset`` into ``_latest`` when it is still the
        file ``inode`` names (any file when None); returns the offset after the last whole line."""
        try:
            with open(path, "rb") as f:
                if inode is not None and os.fstat(f.fileno()).st_ino != inode:
                    return offset  # moved on again: its successor is read from its own start
                f.seek(offset)
                data = f.read()
        except OSError:
            return offset
        end = data.rfind(b"\n") + 1  # a line being written is read next time
        for line in data[:end].splitlines():
            try:
                entry = json.loads(line)
                t, key, ip = float(entry["t"]), (str(entry["host"]), int(entry["port"])), str(entry["ip"])
            except (ValueError, KeyError, TypeError):
                continue
            if key not in self._latest or self._latest[key][0] <= t:
                self._latest[key] = (t, ip)
        return offset + end
