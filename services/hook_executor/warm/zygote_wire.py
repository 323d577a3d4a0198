"""The zygote's wire format, and the stand-in interpreter that speaks it; standard library only.

A request is one message, ``{"argv", "cwd", "env"}`` as ``marshal`` data, sent with the three
standard streams as file descriptors (``SCM_RIGHTS``); the zygote answers ``{"pid": N}``, then
``{"exit": N}``, each as marshal data after its length. ``zygote_server`` (the server) and
``zygote_client`` (``Zygote``/``WarmProcess`` for the executor) import this module; a stand-in runs
it alone, ``python -I -S zygote_wire.py --client SOCKET …`` (see ``interpreters``), for every call
a hook makes to its second Python (trafilatura's worker) or to a warm downloader.

So it imports only what a bare interpreter has loaded or built in (``marshal``, ``os``, ``sys``,
``gc``) and ``_socket``. Each stand-in started in 0.10–0.12 CPU-s and 21 MiB with the server's
imports (asyncio above all) and ``site``, in ~0.03 CPU-s with ``json``, ``socket`` and ``struct``
(a perf profile of a 130-page crawl: 29 ms each, the imports and the collections they set off
most of it), and in ~0.01 like this. marshal (format 4, which every Python 3 from 3.4 reads: the
zygote may run in a venv's Python of another version) is safe here for the same reason the
socket is: only this executor's user can reach it, and whoever can may ask it to run any program.
"""

from __future__ import annotations

import _socket
import marshal
import os
import sys

#: marshal's format of every message (4: readable by every Python from 3.4).
MARSHAL_VERSION = 4
#: Bytes of the length before each answer (network order).
LENGTH = 4
#: The largest request the zygote reads (argv, cwd and a hook's whole environment).
MAX_REQUEST = 1 << 20


def encode(message: dict) -> bytes:
    """``message`` (str/int/list/dict values only) as the wire's bytes."""
    return marshal.dumps(message, MARSHAL_VERSION)


def decode(data: bytes) -> dict:
    """One message. Raises ``ValueError`` if ``data`` is not one marshalled dict."""
    try:
        message = marshal.loads(data)
    except (EOFError, TypeError) as exc:
        raise ValueError(f"not a zygote message: {exc}") from exc
    if not isinstance(message, dict):
        raise ValueError(f"not a zygote message: a {type(message).__name__}")
    return message


def send(sock: _socket.socket, message: dict) -> None:
    """Write one answer: ``message`` after its length (``LENGTH``). Raises ``OSError``."""
    data = encode(message)
    sock.sendall(len(data).to_bytes(LENGTH, "big") + data)


def send_request(sock: _socket.socket, request: dict, fds: list[int]) -> None:
    """Send ``request`` with ``fds`` (``SCM_RIGHTS``), as ``socket.send_fds`` would. Raises ``OSError``."""
    rights = b"".join(fd.to_bytes(4, sys.byteorder, signed=True) for fd in fds)
    sock.sendmsg([encode(request)], [(_socket.SOL_SOCKET, _socket.SCM_RIGHTS, rights)])


def recv_exact(sock: _socket.socket, n: int) -> bytes:
    """Exactly ``n`` bytes from a blocking socket. Raises ``ConnectionError`` if it closes first."""
    buf = b""
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("zygote connection closed")
        buf += chunk
    return buf


def recv(sock: _socket.socket) -> dict:
    """One answer. Raises ``ConnectionError`` if the socket closes mid-way, ``ValueError`` if it
    is not a message."""
    size = int.from_bytes(recv_exact(sock, LENGTH), "big")
    return decode(recv_exact(sock, size))


def unix_call(sock: _socket.socket, method: str, path: str) -> None:
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
    conn = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    request = {"argv": [sys.executable, *rest], "cwd": os.getcwd(), "env": dict(os.environ)}
    try:
        unix_call(conn, "connect", socket_path)
        send_request(conn, request, [0, 1, 2])
        recv(conn)  # the pid: from here on the program runs in the zygote's fork
    except OSError:
        if cold is None:
            raise
        conn.close()
        os.execv(cold, [cold, *rest])
    code = int(recv(conn)["exit"])
    return code if code >= 0 else 128 - code


if __name__ == "__main__":
    import gc

    gc.disable()  # a stand-in lives as long as its call and makes few objects: nothing to collect
    sys.exit(client_main())
