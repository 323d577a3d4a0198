"""The demo site bundled with Boxcar, served on loopback so ``make run`` works offline."""

from __future__ import annotations

import contextlib
import functools
import threading
from collections.abc import Iterator
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

DEMO_SITE = Path(__file__).resolve().parent / "demo-site"


class _QuietHandler(SimpleHTTPRequestHandler):
    def log_message(self, format, *args) -> None:  # noqa: A002 - stdlib signature
        pass


@contextlib.contextmanager
def serve_demo_site(port: int = 0) -> Iterator[str]:
    """Serve ``demo-site/`` on 127.0.0.1 (a free port by default) in a thread.

    Yields:
        The site's index URL, e.g. ``http://127.0.0.1:41234/index.html``.
    """
    handler = functools.partial(_QuietHandler, directory=str(DEMO_SITE))
    server = ThreadingHTTPServer(("127.0.0.1", port), handler)
    thread = threading.Thread(target=server.serve_forever, name="demo-site", daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/index.html"
    finally:
        server.shutdown()
        server.server_close()
