"""The zygote's wire format, and the stand-in interpreter that speaks it; standard library only.

A request is a JSON object after its length (argv, cwd, environment) with the three standard
streams as file descriptors (``SCM_RIGHTS``); the zygote answers ``{"pid": N}``, then
``{"exit": N}``. ``zygote.py`` (the server, and ``Zygote``/``WarmProcess`` for the executor)
imports this module; a stand-in runs it alone, ``python -I -S zygote_wire.py --client SOCKET …``
(see ``warm.py``), for every call a hook makes to its second Python (trafilatura's worker) or to
a warm downloader. So it imports only ``json``, ``os``, ``socket``, ``struct`` and ``sys``: with
the server's imports (asyncio above all) and ``site``, each such call started in 0.10–0.12 CPU-s
and 21 MiB; like this, ~0.02 CPU-s and 11 MiB.
"""

from __future__ import annotations

import json
import os
import socket
import struct
import sys

#: Each message is a JSON object after its length (4 bytes, network order).
FRAME = struct.Struct("!I")


def send(sock: socket.socket, obj: dict) -> None:
    """Write one message: ``obj`` as JSON after its length (``FRAME``). Raises ``OSError``."""
    data = json.dumps(obj).encode()
    sock.sendall(FRAME.pack(len(data)) + data)


def recv_exact(sock: socket.socket, n: int) -> bytes:
    """Exactly ``n`` bytes from a blocking socket. Raises ``ConnectionError`` if it closes first."""
    buf = b""
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("zygote connection closed")
        buf += chunk
    return buf


def recv(sock: socket.socket) -> dict:
    """One message (a JSON object). Raises ``ConnectionError`` if the socket closes mid-way."""
    (size,) = FRAME.unpack(recv_exact(sock, FRAME.size))
    return json.loads(recv_exact(sock, size))


def unix_call(sock: socket.socket, method: str, path: str) -> None:
    """``sock.bind(path)`` / ``sock.connect(path)`` also for a path longer than a Unix socket
    address may be (107 bytes; a deep ``DATA_DIR`` reaches that): through ``/proc/self/fd`` of its
    directory, which names the same file in a few bytes."""
    if len(os.fsencode(path)) < 100:
        getattr(sock, method)(path)
        return
    folder = os.open(os.path.dirname(path) or ".", os.O_RDONLY | os.O_DIRECTORY)
    try:
        getattr(sock, method)(f"/proc/self/fd/{folder}/{os.path.basename(path)}")
    finally:
        os.close(folder)


# ----------------------------------------------------------------------------- a stand-in python


def client_main(argv: list[str] | None = None) -> int:
    """``python -I -S zygote_wire.py --client SOCKET [--cold PYTHON] ARGS…``: run ARGS (``-c CODE …`` or
    ``script …``) in the zygote at SOCKET with this process's streams, cwd and environment;
    returns the child's exit status. Killed, it takes the child with it (the zygote sees the
    connection close). With no zygote there (it exited idle), ``exec`` PYTHON ARGS instead: the
    same program, started cold."""
    args = sys.argv[1:] if argv is None else argv
    socket_path, rest = args[1], args[2:]  # ["--client", SOCKET, …]; ARGS are passed on untouched
    cold = None
    if rest[:1] == ["--cold"]:
        cold, rest = rest[1], rest[2:]
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    request = json.dumps({"argv": [sys.executable, *rest], "cwd": os.getcwd(), "env": dict(os.environ)}).encode()
    try:
        unix_call(conn, "connect", socket_path)
        socket.send_fds(conn, [request], [0, 1, 2])
        recv(conn)  # the pid: from here on the program runs in the zygote's fork
    except OSError:
        if cold is None:
            raise
        conn.close()
        os.execv(cold, [cold, *rest])
    code = int(recv(conn)["exit"])
    return code if code >= 0 else 128 - code


if __name__ == "__main__":
    sys.exit(client_main())
