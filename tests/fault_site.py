"""A local web site with the pages real users' inputs break archivers on (no internet needed).

Routes:

- ``/latin1/page?q=H%F6he``: an ISO-8859-1 page, the charset only in ``Content-Type``;
- ``/doc.pdf`` and ``/manual``: a PDF whose ``/Title`` is ``Boxcar Test Manual``;
- ``/private/``: HTTP Basic auth (``USER`` / ``PASSWORD``);
- ``/status/<code>``: an HTML error page with that status (429 with ``Retry-After: 1``);
- ``/redirect`` → 302 → ``/final/``; ``/redirect-to?u=URL`` → 302 → URL;
- ``/hang/<n>``: never answers (until the server stops);
- ``/spin/``: a page that wedges its renderer when it is printed, as the corpus's ``la-nacion``
  does under ``printToPDF`` (a ``beforeprint`` listener that never yields): the PDF hook waits out
  its timeout and every later DevTools command on its tab goes unanswered; what runs before the PDF
  is not touched, however fast it runs (a wedge 1 s after ``load`` raced the hooks);
- ``/wedge-on-read/``: a page whose ``document.querySelectorAll`` and ``cloneNode`` never return:
  the first hook that reads the page through either (seo, dom) wedges its renderer;
- ``/feeds/relative.xml``: an RSS feed whose item links are relative (``/items/five.html``,
  ``//host:port/items/six.html``) plus one item with no link at all;
- ``/items/<name>``: small pages;
- ``/links/<n>``: a page with ``n`` links to ``/items/link-<i>.html``;
- ``/big/<mb>``: an HTML page of ``mb`` megabytes; ``/binary``: 2 MB of random bytes;
- ``/drip``: a byte every 5 s, forever (well inside any read timeout: only a limit on the total time
  ends it — at 20 s it raced httpx's 20 s read timeout); ``/drop``: the connection closed with no answer;
- ``/redirect-loop/<n>``: an endless chain of 302s;
- ``/feeds/items/<n>.xml``: an RSS feed of ``n`` items; ``/feeds/drip.xml``: a feed that drips.

Every request is counted in ``hits`` (path → number), so a test can tell what was fetched.
"""

from __future__ import annotations

import base64
import io
import os
import threading
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

USER, PASSWORD = "alice", "s3cret-Pa55"
PDF_TITLE = "Boxcar Test Manual"

LATIN1_PAGE = """<!DOCTYPE html>
<html><head><title>H\u00f6he und Gr\u00f6\u00dfe</title></head><body>
<h1>\u00dcber die H\u00f6he der Berge</h1>
<p>Die Zugspitze ist M\u00fcnchens n\u00e4chster Gipfel. \u00c4pfel, \u00d6l und \u00dcbermut.</p>
<p>Ein zweiter Absatz mit mehr Text, damit Extraktoren gen\u00fcgend Inhalt finden. Die Gr\u00f6\u00dfe der
W\u00e4lder und die Sch\u00f6nheit der Seen sind ber\u00fchmt.</p>
<a href="/items/one.html">eins</a>
</body></html>
"""


def page(title: str, body: str) -> bytes:
    return (
        f"<!DOCTYPE html><html><head><title>{title}</title></head><body><h1>{title}</h1><p>{body}</p></body></html>"
    ).encode()


def make_pdf(title: str) -> bytes:
    """A one-page PDF with ``/Title`` (written by pypdf, not by hand)."""
    from pypdf import PdfWriter

    writer = PdfWriter()
    writer.add_blank_page(width=612, height=792)
    writer.add_metadata({"/Title": title, "/Producer": "Boxcar tests"})
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


class FaultSite:
    """The site on a free loopback port: ``with FaultSite() as site: site.url("/doc.pdf")``."""

    def __init__(self) -> None:
        self.hits: Counter[str] = Counter()
        self.stopping = threading.Event()
        self.pdf = make_pdf(PDF_TITLE)
        site = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args) -> None:
                pass

            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                path = urlsplit(self.path).path
                site.hits[path] += 1
                if path == "/redirect-to":  # 302 to the URL in ?u=
                    target = parse_qs(urlsplit(self.path).query).get("u", ["/"])[0]
                    status, body, headers = 302, b"", {"Location": target, "Content-Type": "text/plain"}
                else:
                    status, body, headers = site.respond(path, self.headers)
                if status == "drip":
                    self.send_response(200)
                    self.send_header("Content-Type", "application/rss+xml")
                    self.end_headers()
                    while not site.stopping.wait(5):
                        self.wfile.write(b" ")
                        self.wfile.flush()
                    return
                if status is None:
                    self.close_connection = True
                    return
                self.send_response(status)
                for key, value in {"Content-Length": str(len(body)), **headers}.items():
                    self.send_header(key, value)
                self.end_headers()
                self.wfile.write(body)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.base = f"http://127.0.0.1:{self.server.server_address[1]}"

    @staticmethod
    def drip() -> str:
        return "drip"

    def url(self, path: str) -> str:
        return self.base + path

    def respond(self, path: str, headers) -> tuple[int | str | None, bytes, dict[str, str]]:
        html = {"Content-Type": "text/html; charset=utf-8"}
        if path == "/latin1/page":
            return 200, LATIN1_PAGE.encode("iso-8859-1"), {"Content-Type": "text/html; charset=ISO-8859-1"}
        if path in ("/doc.pdf", "/manual"):
            return 200, self.pdf, {"Content-Type": "application/pdf"}
        if path.startswith("/private"):
            expected = "Basic " + base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
            if headers.get("Authorization") != expected:
                return 401, page("401 Unauthorized", "log in"), {**html, "WWW-Authenticate": 'Basic realm="boxcar"'}
            return 200, page("Private Page", "secret content for alice"), html
        if path.startswith("/status/"):
            code = int(path.split("/")[2])
            extra = {"Retry-After": "1"} if code == 429 else {}
            return code, page(f"Error {code} page", f"This is the HTTP {code} error body."), {**html, **extra}
        if path == "/redirect":
            return 302, b"redirecting", {"Location": "/final/", "Content-Type": "text/plain"}
        if path == "/final/":
            return 200, page("Final Page", "you arrived"), html
        if path.startswith("/hang/") or path == "/hang":
            self.stopping.wait()
            return None, b"", {}
        if path == "/spin/":
            spin = '<script>addEventListener("beforeprint", () => { for (;;) {} });</script>'
            return 200, page("Spinning Page", "this page stops answering") + spin.encode(), html
        if path == "/wedge-on-read/":
            wedge = (
                "<script>Document.prototype.querySelectorAll = Node.prototype.cloneNode = "
                "function () { for (;;) {} };</script>"
            )
            return 200, page("Wedging Page", "this page stops answering when read") + wedge.encode(), html
        if path == "/feeds/relative.xml":
            host = self.base.split("://", 1)[1]
            feed = (
                '<?xml version="1.0"?><rss version="2.0"><channel><title>Relative links</title>'
                "<item><title>Five</title><link>/items/five.html</link><guid isPermaLink='false'>five</guid></item>"
                f"<item><title>Six</title><link>//{host}/items/six.html</link>"
                "<guid isPermaLink='false'>six</guid></item>"
                "<item><title>No link</title><guid isPermaLink='false'>nolink</guid></item>"
                "</channel></rss>"
            )
            return 200, feed.encode(), {"Content-Type": "application/rss+xml"}
        if path.startswith("/links/"):
            n = int(path.split("/")[2])
            links = "".join(f'<a href="/items/link-{i}.html">link {i}</a>\n' for i in range(n))
            return 200, page(f"{n} links", links), html
        if path.startswith("/big/"):
            mb = int(path.split("/")[2])
            filler = ("<p>" + "Boxcar filler text. " * 50 + "</p>\n") * (mb * 1024 * 1024 // 1010 + 1)
            return 200, page("A big page", filler), html
        if path == "/binary":
            return 200, os.urandom(2 * 1024 * 1024), {"Content-Type": "application/octet-stream"}
        if path in ("/drip", "/feeds/drip.xml"):
            return self.drip(), b"", {}
        if path == "/drop":
            return None, b"", {}
        if path.startswith("/redirect-loop/"):
            n = int(path.split("/")[2])
            return 302, b"", {"Location": f"/redirect-loop/{n + 1}", "Content-Type": "text/plain"}
        if path.startswith("/feeds/items/"):
            n = int(path.rsplit("/", 1)[1].removesuffix(".xml"))
            items = "".join(
                f"<item><title>Item {i}</title><link>{self.base}/items/feed-{i}.html</link></item>" for i in range(n)
            )
            return (
                200,
                f'<rss version="2.0"><channel><title>{n} items</title>{items}</channel></rss>'.encode(),
                {"Content-Type": "application/rss+xml"},
            )
        if path.startswith("/items/"):
            name = path.rsplit("/", 1)[1].removesuffix(".html")
            return 200, page(f"Item {name}", f"The item called {name}."), html
        return 404, page("Not found", path), html

    def __enter__(self) -> FaultSite:
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stopping.set()
        self.server.shutdown()
        self.server.server_close()
