"""The zygote's wire format, and the stand-in interpreter that speaks it; standard library only.

Every message is ``marshal`` data after its length (``LENGTH`` bytes, network order). A request,
``{"argv", "cwd", "env"}``, carries the three standard streams as file descriptors
(``SCM_RIGHTS``) on its first bytes; the zygote answers ``{"pid": N}``, then ``{"exit": N}``.
``zygote_server`` (the server) and ``zygote_client`` (``Zygote``/``WarmProcess`` for the executor)
import this module; a stand-in runs it alone, ``python -I -S zygote_wire.py --client SOCKET …``
(see ``interpreters``), for every call a hook makes to its second Python (trafilatura's worker) or
to a warm downloader.

So it imports only what a bare interpreter has loaded or built in (``marshal``, ``os``, ``sys``,
``gc``) and ``_socket``. A stand-in's start measured alone took 0.10–0.12 CPU-s and 21 MiB with the
server's imports (asyncio above all) and ``site``, 22 ms with ``json``, ``socket`` and ``struct``
(29 ms each in a perf profile of a 130-page crawl, the imports and the collections they set off
most of it), and 10.6 ms like this. marshal (format 4, which every Python 3 from 3.4 reads: the
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
#: Bytes of the length before each message (network order).
LENGTH = 4
#: The largest request the zygote reads (argv, cwd and a hook's whole environment).
MAX_REQUEST = 1 << 20
#: Bytes read with a request's descriptors; the rest of a longer request is read after them.
_FIRST_READ = 1 << 16


def encode(message: dict) -> bytes:
    """``message`` (str/int/list/dict values only) as the wire's bytes.

    Raises:
        ValueError: a value marshal cannot write.
    """
    return marshal.dumps(message, MARSHAL_VERSION)


def length_of(header: bytes) -> int:
    """The length a message's first ``LENGTH`` bytes give."""
    return int.from_bytes(header, "big")


def framed(message: dict) -> bytes:
    """``message`` after its length, as it goes on the wire."""
    data = encode(message)
    return len(data).to_bytes(LENGTH, "big") + data


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
    """Write one answer (``framed``). Raises ``OSError``."""
    sock.sendall(framed(message))


def send_request(sock: _socket.socket, request: dict, fds: list[int]) -> None:
    """Send ``request`` (``framed``) with ``fds`` on its first bytes (``SCM_RIGHTS``, as
    ``socket.send_fds`` sends them). Raises ``OSError``."""
    data = framed(request)
    rights = b"".join(fd.to_bytes(4, sys.byteorder, signed=True) for fd in fds)
    sent = sock.sendmsg([data], [(_socket.SOL_SOCKET, _socket.SCM_RIGHTS, rights)])
    if sent < len(data):
        sock.sendall(data[sent:])


def recv_request(sock: _socket.socket, max_fds: int) -> tuple[dict, list[int]]:
    """One request and the descriptors that came with it (the caller owns them).

    Raises:
        ConnectionError: the socket closed before the whole request.
        ValueError: not a request, or one longer than ``MAX_REQUEST`` (its descriptors are closed).
        OSError: reading failed.
    """
    data, ancillary, _flags, _address = sock.recvmsg(_FIRST_READ, _socket.CMSG_SPACE(max_fds * 4))
    fds = [
        int.from_bytes(payload[i : i + 4], sys.byteorder, signed=True)
        for level, kind, payload in ancillary
        if level == _socket.SOL_SOCKET and kind == _socket.SCM_RIGHTS
        for i in range(0, len(payload) - len(payload) % 4, 4)
    ]
    try:
        if len(data) < LENGTH:
            raise ValueError("a request without its length") if data else ConnectionError("closed")
        size, body = length_of(data[:LENGTH]), data[LENGTH:]
        if size > MAX_REQUEST:
            raise ValueError(f"a request of {size} bytes (at most {MAX_REQUEST})")
        if len(body) < size:
            body += recv_exact(sock, size - len(body))
        return decode(body[:size]), fds
    except BaseException:
        for fd in fds:
            os.close(fd)
        raise


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
    return decode(recv_exact(sock, length_of(recv_exact(sock, LENGTH))))


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


# ----------------------------------------------------------------------------- what a fork runs


#: ``PYTHON*`` variables (the Python docs' "Environment variables") that only an interpreter's start
#: reads: the zygote started without them (``-I``) and a fork cannot take them on, so a program
#: given one starts cold. ``PYTHONUNBUFFERED`` and ``PYTHONDONTWRITEBYTECODE`` are not here: a fork
#: applies them itself (``zygote_server``); the rest are read while a program runs (``PYTHONBREAKPOINT``,
#: ``PYTHONCASEOK``, ``PYTHONASYNCIODEBUG``) or only by an interactive one (``PYTHONSTARTUP``).
STARTUP_ONLY = frozenset(
    {
        "PYTHONHOME", "PYTHONPATH", "PYTHONSAFEPATH", "PYTHONPLATLIBDIR", "PYTHONOPTIMIZE", "PYTHONDEBUG",
        "PYTHONINSPECT", "PYTHONVERBOSE", "PYTHONPYCACHEPREFIX", "PYTHONHASHSEED", "PYTHONINTMAXSTRDIGITS",
        "PYTHONIOENCODING", "PYTHONNOUSERSITE", "PYTHONUSERBASE", "PYTHONEXECUTABLE", "PYTHONWARNINGS",
        "PYTHONFAULTHANDLER", "PYTHONTRACEMALLOC", "PYTHONPROFILEIMPORTTIME", "PYTHONMALLOC", "PYTHONMALLOCSTATS",
        "PYTHONCOERCECLOCALE", "PYTHONDEVMODE", "PYTHONUTF8", "PYTHONWARNDEFAULTENCODING", "PYTHONNODEBUGRANGES",
        "PYTHONPERFSUPPORT", "PYTHON_PERF_JIT_SUPPORT", "PYTHON_CPU_COUNT", "PYTHON_FROZEN_MODULES", "PYTHON_GIL",
        "PYTHON_JIT", "PYTHON_COLORS",
    }
)  # fmt: skip


def program_of(argv: list[str]) -> tuple[str, str, list[str]] | None:
    """What ``argv`` (``[python, …]``) asks a zygote's fork to run: ``("-c", code, args)``,
    ``("script", path, args)``, or None for anything else (an interpreter option such as ``-u`` or
    ``-m`` before the program, ``-`` or ``""``, or no program at all), which only a cold ``python``
    runs right; None too for an argv with anything but strings in it. The one reading of a
    request's argv: the server runs and compiles by it."""
    if not all(isinstance(arg, str) for arg in argv):
        return None
    if len(argv) >= 3 and argv[1] == "-c":
        return "-c", argv[2], argv[3:]
    if len(argv) >= 2 and argv[1] and not argv[1].startswith("-"):
        return "script", argv[1], argv[2:]
    return None


def cold_reason(argv: list[str], env: dict[str, str]) -> str | None:
    """Why ``argv`` with ``env`` must run in a new interpreter rather than a zygote's fork (its argv
    is not one ``program_of`` reads, or ``env`` sets one of ``STARTUP_ONLY``), or None. The
    executor and a stand-in both ask it before they send a request."""
    if program_of(argv) is None:
        return f"{argv[1:2]} is not a script or -c"
    for key in STARTUP_ONLY.intersection(env):
        if env[key]:
            return f"{key} is set"
    return None


# ----------------------------------------------------------------------------- a stand-in python


def client_main(argv: list[str] | None = None) -> int:
    """``python -I -S zygote_wire.py --client SOCKET [--cold PYTHON] ARGS…``: run ARGS (``-c CODE …`` or
    ``script …``) in the zygote at SOCKET with this process's streams, cwd and environment;
    returns the child's exit status. Killed, it takes the child with it (the zygote sees the
    connection close). With no zygote there (it exited idle), or ARGS or an environment a fork
    cannot honour (``cold_reason``), ``exec`` PYTHON ARGS instead: the same program, started cold."""
    args = sys.argv[1:] if argv is None else argv
    socket_path, rest = args[1], args[2:]  # ["--client", SOCKET, …]; ARGS are passed on untouched
    cold = None
    if rest[:1] == ["--cold"]:
        cold, rest = rest[1], rest[2:]
    request = {"argv": [sys.executable, *rest], "cwd": os.getcwd(), "env": dict(os.environ)}
    reason = cold_reason(request["argv"], request["env"])  # what a fork cannot honour, if anything
    if reason is None:
        conn = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
        try:
            unix_call(conn, "connect", socket_path)
            send_request(conn, request, [0, 1, 2])
            recv(conn)  # the pid: from here on the program runs in the zygote's fork
        except OSError:
            if cold is None:
                raise
            conn.close()  # no zygote there: start it cold, below
        else:
            code = int(recv(conn)["exit"])
            return code if code >= 0 else 128 - code
    elif cold is None:
        raise SystemExit(f"zygote_wire: {reason}, and no --cold python was given to run it")
    assert cold is not None
    os.execv(cold, [cold, *rest])


if __name__ == "__main__":
    import gc

    gc.disable()  # a stand-in lives as long as its call and makes few objects: nothing to collect
    sys.exit(client_main())
