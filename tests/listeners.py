"""Stand-ins for the stack's own services in egress tests, and the spellings that try to reach them."""

from __future__ import annotations

import socket
import threading

#: Every way of writing "this host" the issue's probe and the usual SSRF lists use (the
#: unspecified address, shorthand IPv4, IPv4 inside IPv6, NAT64 / 6to4 embeddings, names).
THIS_HOST_SPELLINGS = [
    "127.0.0.1",
    "127.0.0.2",
    "127.1",
    "0x7f.1",
    "2130706433",
    "017700000001",
    "0.0.0.0",
    "0",
    "[::]",
    "[::1]",
    "[::ffff:0:0]",
    "[::ffff:127.0.0.1]",
    "[::ffff:7f00:1]",
    "[::127.0.0.1]",
    "[::ffff:0:127.0.0.1]",
    "[64:ff9b::127.0.0.1]",
    "[2002:7f00:1::]",
    "localhost",
]

METADATA_SPELLINGS = [
    "169.254.169.254",
    "169.254.169.253",
    "169.254.170.2",
    "2852039166",  # 169.254.169.254 as one number
    "[::ffff:169.254.169.254]",
    "[::ffff:a9fe:a9fe]",
    "[64:ff9b::a9fe:a9fe]",
    "[64:ff9b::169.254.169.254]",
    "[2002:a9fe:a9fe::]",
    "[fd00:ec2::254]",
    "100.100.100.200",
]


class CountingListener:
    """A TCP listener on every address of this host (dual-stack ``[::]``), standing in for one of
    the stack's services: it counts the connections it accepts and answers each with a 200."""

    def __init__(self) -> None:
        self.sock = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("::", 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        self.connections = 0
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.connections += 1
            with conn:
                conn.sendall(b"HTTP/1.0 200 OK\r\nContent-Length: 6\r\n\r\nsecret")

    def close(self) -> None:
        self.sock.close()
