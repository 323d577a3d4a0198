"""The web UI in-process (no NATS, no hooks): sessions, CSRF, guards, archived-file path checks and
security headers, search and delete over the API. The browser drives a whole stack in
``tests/test_web_ui.py``."""

from __future__ import annotations

import json
import os
import re
from collections import Counter
from datetime import timedelta
from pathlib import Path

import pytest
from litestar.testing import TestClient
from sqlalchemy import select

from boxcar.ingest.access import operator
from boxcar.ingest.api.auth import create_token
from boxcar.ingest.app import create_app
from boxcar.ingest.web import accounts
from boxcar.result_projector import fulltext
from boxcar.shared.archive_store import ArchiveStore
from boxcar.shared.clock import utcnow
from boxcar.shared.db import Database
from boxcar.shared.db.models import ArchiveResult, Crawl, Process, Snapshot, Status
from boxcar.shared.settings import Settings
from boxcar.shared.storage import snapshot_dir
from tests.helpers import wait_until

PASSWORD = "correct horse battery"
CSRF = re.compile(r'name="_csrf_token" value="([^"]+)"')
HOSTILE = b"<html><body><h1>hi</h1><script>fetch('/api/v1/crawls?c=' + document.cookie)</script></body></html>"


@pytest.fixture
def archive(db: Database, tmp_path: Path):
    """A database with a user, a sealed snapshot (an HTML page, its text, a screenshot) and its
    files, and a started one."""
    data_dir = tmp_path / "data"
    accounts.create_user(db, "alice", PASSWORD, role="admin")
    now = utcnow()
    crawl = Crawl.new(user="system", first_url="http://site.test/", seed_count=2, now=now)
    snaps = {}
    with db.write() as s:
        s.add(crawl)
        s.flush()
        for n, status in ((1, Status.SEALED), (2, Status.STARTED)):
            sid = f"{n:032x}"
            url = f"http://site.test/page{n}"
            s.add(
                Snapshot(
                    id=sid,
                    crawl_id=crawl.id,
                    url=url,
                    url_hash=f"{n:064x}",
                    status=status,
                    title=f"Page {n}",
                    domain="site.test",
                    output_dir=snapshot_dir("system", now, url, sid),
                )
            )
            snaps[status] = sid
        s.flush()
        sealed = snaps[Status.SEALED]
        for plugin, files in (
            ("wget", {"site.test/page1.html": {"size": len(HOSTILE), "mimetype": "text/html"}}),
            ("htmltotext", {"htmltotext.txt": {"size": 10, "mimetype": "text/plain"}}),
            ("screenshot", {"screenshot.png": {"size": 8, "mimetype": "image/png"}}),
        ):
            s.add(
                ArchiveResult(
                    id=new_hex(plugin),
                    snapshot_id=sealed,
                    plugin=plugin,
                    hook_name=f"on_Snapshot__{plugin}",
                    status="succeeded",
                    output_files=files,
                    process_id=new_hex("p" + plugin),
                )
            )
            s.add(Process(id=new_hex("p" + plugin), snapshot_id=sealed, plugin=plugin, stdout="ok"))
    root = data_dir / snapshot_dir("system", now, "http://site.test/page1", sealed)
    (root / "wget" / "site.test").mkdir(parents=True)
    (root / "wget" / "site.test" / "page1.html").write_bytes(HOSTILE)
    (root / "htmltotext").mkdir()
    (root / "htmltotext" / "htmltotext.txt").write_text("The quick brown fox jumps over the lazy dog")
    (root / "screenshot").mkdir()
    (root / "screenshot" / "screenshot.png").write_bytes(b"\x89PNG\r\n\x1a\n")
    (root / "image.svg").write_text('<svg xmlns="http://www.w3.org/2000/svg"><script>alert(1)</script></svg>')
    os.symlink("/etc/passwd", root / "passwd")
    os.symlink(data_dir / "index.sqlite3", root / "wget" / "db")
    (data_dir / "index.sqlite3").touch()
    fulltext.index_snapshots(db, ArchiveStore.local(data_dir), [sealed])
    return {
        "db": db,
        "data_dir": data_dir,
        "sealed": sealed,
        "started": snaps[Status.STARTED],
        "root": root,
        "crawl": crawl.id,
    }


def new_hex(seed: str) -> str:
    import hashlib

    return hashlib.md5(seed.encode()).hexdigest()


def client(archive, base_url: str = "http://testserver.local", **settings) -> TestClient:
    # no NATS here (a closed port): control requests answer 503, wake-ups are dropped
    settings.setdefault("nats_url", "nats://127.0.0.1:9")
    app = create_app(Settings(data_dir=archive["data_dir"], **settings), archive["db"])
    return TestClient(app, base_url=base_url)


def csrf(c: TestClient, path: str = "/login") -> str:
    return CSRF.search(c.get(path).text).group(1)


def log_in(c: TestClient) -> None:
    response = c.post(
        "/login",
        data={"username": "alice", "password": PASSWORD, "_csrf_token": csrf(c), "next": "/"},
        follow_redirects=False,
    )
    assert response.status_code == 303, response.text


def form_posts(archive) -> list[str]:
    sid, cid = archive["sealed"], archive["crawl"]
    return [
        "/add",
        f"/snapshots/{sid}/tags",
        f"/snapshots/{sid}/delete",
        f"/snapshots/{sid}/archive-again",
        f"/crawls/{cid}/pause",
        f"/crawls/{cid}/cancel",
        "/feeds",
        f"/feeds/{'0' * 32}/poll",
        f"/feeds/{'0' * 32}/remove",
        "/settings/tokens",
        f"/settings/tokens/{'0' * 32}/revoke",
    ]


def test_without_a_session_every_form_post_and_write_endpoint_is_refused(archive):
    with client(archive) as c:
        token = csrf(c)  # a valid CSRF token, but nobody logged in
        for path in form_posts(archive):
            assert c.post(path, data={"_csrf_token": token, "urls": "http://a.test/"}).status_code == 401, path
            assert c.post(path, data={"urls": "http://a.test/"}).status_code in (401, 403), path
        for method, path in (
            ("POST", "/api/v1/crawls"),
            ("POST", "/api/v1/imports"),
            ("DELETE", f"/api/v1/snapshots/{archive['sealed']}"),
            ("POST", f"/api/v1/crawls/{archive['crawl']}/cancel"),
            ("POST", "/api/v1/feeds"),
        ):
            assert c.request(method, path, json={"urls": ["http://a.test/"]}).status_code in (401, 403), path
        assert c.get("/add", follow_redirects=False).headers["location"].startswith("/login?next=")
        assert c.get("/", follow_redirects=False).status_code == 303  # PUBLIC_READS is off
        assert c.get(f"/archive/{archive['sealed']}/screenshot/screenshot.png").status_code == 401
    with db_still_there(archive):
        pass


class db_still_there:
    """Nothing was deleted by the refused requests."""

    def __init__(self, archive) -> None:
        self.archive = archive

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        with self.archive["db"].read() as s:
            assert s.get(Snapshot, self.archive["sealed"]) is not None


def test_with_a_session_a_wrong_csrf_token_is_refused(archive):
    with client(archive) as c:
        log_in(c)
        for path in form_posts(archive):
            assert c.post(path, data={"_csrf_token": "x" * 64, "urls": "http://a.test/"}).status_code == 403, path
            assert c.post(path, data={"urls": "http://a.test/"}).status_code == 403, path
            assert c.post(path, data={"urls": "x"}, headers={"x-csrftoken": "forged"}).status_code == 403, path
    with db_still_there(archive):
        pass


def test_session_cookie_flags_login_and_logout(archive):
    with client(archive, base_url="https://boxcar.test") as c:
        token = csrf(c)
        bad = c.post("/login", data={"username": "alice", "password": "wrong", "_csrf_token": token})
        assert bad.status_code == 401
        ok = c.post(
            "/login",
            data={"username": "alice", "password": PASSWORD, "_csrf_token": token, "next": "//evil.test/"},
            follow_redirects=False,
        )
        assert ok.headers["location"] == "/"  # never an open redirect
        cookie = ok.headers["set-cookie"]
        assert "boxcar_session=" in cookie and "HttpOnly" in cookie and "SameSite=lax" in cookie
        assert "Secure" in cookie  # behind TLS
        assert c.get("/settings").status_code == 200
        assert c.post("/logout", data={"_csrf_token": csrf(c, "/settings")}, follow_redirects=False).status_code == 303
        assert c.get("/settings", follow_redirects=False).status_code == 303
    with archive["db"].read() as s:
        from sqlalchemy import func, select

        from boxcar.shared.db.models import UserSession

        assert s.scalar(select(func.count()).select_from(UserSession)) == 0


def test_guessing_passwords_is_throttled_per_account_without_naming_accounts(archive):
    """The probe: 30 wrong passwords in 12.6 s, no delay or lock-out. Now the fifth failure locks
    the name out (429 with Retry-After) and then even the right password is refused unchecked; an
    unknown name gets word for word the same answers; each failure is logged; once the lock-out
    is over the right password works and clears the count."""
    import logging

    from sqlalchemy import update

    from boxcar.shared.db.models import LoginThrottle

    logged: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = logged.append
    logging.getLogger("boxcar.ingest.web.accounts").addHandler(handler)

    def attempts(c: TestClient, username: str, passwords: list[str]) -> list:
        token = csrf(c)
        return [
            c.post("/login", data={"username": username, "password": p, "_csrf_token": token}, follow_redirects=False)
            for p in passwords
        ]

    with client(archive) as c:
        guesses = [f"guess-{i}" for i in range(8)]
        alice = attempts(c, "alice", [*guesses, PASSWORD])
        mallory = attempts(c, "mallory", [*guesses, PASSWORD])
        for answers in (alice, mallory):
            assert [a.status_code for a in answers] == [401] * 4 + [429] * 5
            assert all(int(a.headers["retry-after"]) > 0 for a in answers[4:])
        # no difference between a real account and a made-up one, but for the name echoed back
        assert [a.text.replace("mallory", "alice") for a in mallory] == [a.text for a in alice]
        assert "Too many failed logins" in alice[-1].text
        assert sum("failed login for 'alice'" in r.getMessage() for r in logged) == 5
        assert any("account:alice locked out" in r.getMessage() for r in logged)
        with archive["db"].write() as s:  # the lock-out is over
            s.execute(update(LoginThrottle).values(locked_until=None))
        [ok] = attempts(c, "alice", [PASSWORD])
        assert ok.status_code == 303
        with archive["db"].read() as s:
            assert s.get(LoginThrottle, "account:alice") is None
    logging.getLogger("boxcar.ingest.web.accounts").removeHandler(handler)


def test_a_form_post_from_another_origin_is_refused_even_with_a_valid_token(archive):
    """A page of another origin (an archived page on the archive origin: same host, other port, so
    same-site and able to plant a ``csrftoken`` cookie) cannot post Boxcar's forms, though its token
    is one Boxcar signed; Boxcar's own pages and non-browser clients can (web/cross_origin.py)."""
    from boxcar.shared.db.models import ApiToken

    with client(archive) as c:
        log_in(c)
        token = csrf(c, "/settings")
        forged = [
            {"sec-fetch-site": "same-site"},
            {"sec-fetch-site": "cross-site"},
            {"origin": "http://testserver.local:8123"},  # a browser without Fetch Metadata
            {"origin": "null"},  # a sandboxed page
            {"sec-fetch-site": "same-site", "origin": "http://testserver.local"},  # Fetch Metadata decides
            {"origin": "http://testserver.local", "host": "evil.test@testserver.local"},  # a Host that is no host
        ]
        for headers in forged:
            refused = c.post("/settings/tokens", data={"name": "forged", "_csrf_token": token}, headers=headers)
            assert refused.status_code == 403 and "Cross-origin request refused" in refused.text, headers
        for headers in forged[:2]:  # logging in (or out) is a change too
            login = c.post(
                "/login", data={"username": "alice", "password": PASSWORD, "_csrf_token": token}, headers=headers
            )
            assert login.status_code == 403 and "Cross-origin request refused" in login.text, headers
        own = [
            {"sec-fetch-site": "same-origin"},
            {"sec-fetch-site": "none"},
            {"origin": "http://testserver.local"},
            {"origin": "http://testserver.local", "host": "testserver.local:80"},  # the default port written
            {},
        ]
        for headers in own:
            created = c.post("/settings/tokens", data={"name": "mine", "_csrf_token": token}, headers=headers)
            assert created.status_code == 201, (headers, created.text)
        api_token = create_token(archive["db"], "script")  # the API takes tokens, not cookies: not checked
        extension = {"Authorization": f"Bearer {api_token}", "sec-fetch-site": "cross-site"}
        queued = c.post("/api/v1/crawls", json={"urls": ["http://x.example/1"]}, headers=extension)
        assert queued.status_code == 201, queued.text
    with archive["db"].read() as s:
        names = [t.name for t in s.scalars(select(ApiToken))]
    assert "forged" not in names and names.count("mine") == len(own)


def test_behind_a_proxy_that_rewrites_host_public_url_s_origin_may_post(archive):
    """Over plain HTTP on a LAN browsers send no ``Sec-Fetch-Site``: ``Origin`` is compared with
    ``Host``, or with ``PUBLIC_URL``'s origin where a proxy changed ``Host``."""
    with client(archive, public_url="http://boxcar.lan/") as c:
        log_in(c)
        token = csrf(c, "/settings")
        proxied = c.post(
            "/settings/tokens", data={"name": "lan", "_csrf_token": token}, headers={"origin": "http://boxcar.lan"}
        )
        assert proxied.status_code == 201, proxied.text
        other = c.post(
            "/settings/tokens", data={"name": "lan", "_csrf_token": token}, headers={"origin": "http://boxcar.lan:8001"}
        )
        assert other.status_code == 403


def test_csrf_cookie_is_httponly_and_pages_refuse_framing(archive):
    with client(archive) as c:
        response = c.get("/login")
        assert "HttpOnly" in response.headers["set-cookie"]
        assert response.headers["x-frame-options"] == "DENY"


def test_api_tokens_are_listed_and_revocable_on_the_settings_page(archive):
    token = create_token(archive["db"], "script")
    with client(archive) as c:
        log_in(c)
        assert c.get("/api/v1/status", headers={"Authorization": f"Bearer {token}"}).status_code == 200
        page = c.get("/settings").text
        assert "script" in page and token[:10] in page and token not in page
        created = c.post("/settings/tokens", data={"name": "phone", "_csrf_token": csrf(c, "/settings")})
        assert created.status_code == 201 and "bx_" in created.text
        token_id = re.search(r"/settings/tokens/([0-9a-f]{32})/revoke", page).group(1)
        c.post(f"/settings/tokens/{token_id}/revoke", data={"_csrf_token": csrf(c, "/settings")})
        assert c.get("/api/v1/status", headers={"Authorization": f"Bearer {token}"}).status_code == 401


@pytest.mark.parametrize(
    "path",
    [
        "../../index.sqlite3",
        "%2e%2e/%2e%2e/index.sqlite3",
        "%2E%2E%2F%2E%2E%2Findex.sqlite3",
        "wget/../../../../../index.sqlite3",
        "passwd",  # a symlink to /etc/passwd planted in the snapshot dir
        "wget/db",  # a symlink to the database
        ".hidden",
        "nothing.html",
    ],
)
def test_archived_paths_stay_inside_the_snapshot_dir(archive, path):
    with client(archive, public_reads=True) as c:
        raw = f"/archive/{archive['sealed']}/{path}".encode()
        response = _raw_get(c, raw)
        assert response.status_code == 404, (path, response.status_code)
        assert b"root:" not in response.content


def _raw_get(c: TestClient, raw_path: bytes):
    """GET with the path exactly as given (no client-side normalisation of dots or escapes)."""
    import httpx

    url = httpx.URL("http://testserver.local/").copy_with(raw_path=raw_path)
    return c.get(url)


def test_archived_files_are_sandboxed_by_the_security_mode(archive):
    sid = archive["sealed"]
    with client(archive, public_reads=True) as c:
        page = c.get(f"/archive/{sid}/wget/site.test/page1.html")
        assert page.status_code == 200 and page.content == HOSTILE
        # no charset added: an archived page names its own encoding (<meta charset>)
        assert page.headers["content-type"] == "text/html"
        csp = page.headers["content-security-policy"]
        assert csp.startswith("sandbox") and "allow-scripts" not in csp and "allow-same-origin" not in csp
        assert page.headers["x-content-type-options"] == "nosniff"
        assert "inline" in page.headers["content-disposition"]
        head = c.head(f"/archive/{sid}/wget/site.test/page1.html")
        assert head.status_code == 200 and head.headers["content-length"] == str(len(HOSTILE))
        assert head.headers["content-security-policy"] == csp and head.headers["content-type"] == "text/html"
        svg = c.get(f"/archive/{sid}/image.svg")
        assert svg.headers["content-security-policy"].startswith("sandbox")
        png = c.get(f"/archive/{sid}/screenshot/screenshot.png")
        assert png.headers["content-type"] == "image/png"
        text = c.get(f"/archive/{sid}/htmltotext/htmltotext.txt")
        assert text.headers["content-type"] == "text/plain; charset=utf-8"  # the extractors write UTF-8
    with client(archive, public_reads=True, archive_security_mode="sandboxed-scripts") as c:
        csp = c.get(f"/archive/{sid}/wget/site.test/page1.html").headers["content-security-policy"]
        assert "allow-scripts" in csp and "allow-same-origin" not in csp
    with client(archive, public_reads=True, archive_security_mode="separate-origin", archive_port=8123) as c:
        moved = c.get(f"/archive/{sid}/wget/site.test/page1.html", follow_redirects=False)
        assert moved.status_code == 307
        assert moved.headers["location"] == f"http://testserver.local:8123/archive/{sid}/wget/site.test/page1.html"


def test_the_archive_origin_serves_files_and_nothing_else(archive):
    from boxcar.ingest.app import create_archive_app

    settings = Settings(data_dir=archive["data_dir"], public_reads=True, archive_security_mode="separate-origin")
    with TestClient(create_archive_app(settings, archive["db"])) as c:
        page = c.get(f"/archive/{archive['sealed']}/wget/site.test/page1.html")
        assert page.status_code == 200
        assert "allow-same-origin" in page.headers["content-security-policy"]  # its own origin, not Boxcar's
        for path in ("/", "/api/v1/crawls", "/login", "/settings", f"/snapshots/{archive['sealed']}"):
            assert c.get(path).status_code in (404, 405), path


def test_the_archive_origin_answers_the_replay_frame_as_the_service_worker_would(archive):
    """``/replay/?source=…`` gets ReplayWeb.page's own inner page from the server too (the frame a
    not-yet-controlling service worker lets through), never a 404; only once the viewer is there."""
    from boxcar.ingest.app import create_archive_app
    from boxcar.ingest.web import replay

    settings = Settings(data_dir=archive["data_dir"], public_reads=True, archive_security_mode="separate-origin")
    source = f"/archive/{archive['sealed']}/wget/warc/a.warc.gz"
    with TestClient(create_archive_app(settings, archive["db"])) as c:
        assert c.get("/replay/", params={"source": source}).status_code == 404  # no viewer installed
        folder = replay.assets_dir(settings)
        folder.mkdir(parents=True)
        for name in replay.ASSETS:
            (folder / name).write_text("// stand-in")
        frame = c.get("/replay/", params={"source": source, "embed": "replayonly"})
        assert frame.status_code == 200 and frame.headers["content-type"].startswith("text/html")
        assert '<script src="/replay/ui.js"></script>' in frame.text and "<replay-app-main>" in frame.text
        assert c.get("/replay/sw.js").status_code == 200


def test_public_reads_show_the_archive_but_never_change_it(archive):
    with client(archive, public_reads=True) as c:
        listing = c.get("/")
        assert listing.status_code == 200 and "Page 1" in listing.text
        assert c.get(f"/snapshots/{archive['sealed']}").status_code == 200
        assert c.get("/add", follow_redirects=False).status_code == 303
        assert c.post(f"/snapshots/{archive['sealed']}/delete", data={"_csrf_token": csrf(c)}).status_code == 401


def test_search_api_and_list_filters(archive):
    token = create_token(archive["db"], "t", scope="read")
    auth = {"Authorization": f"Bearer {token}"}
    with client(archive) as c:
        found = c.get("/api/v1/search", params={"q": "brown fox jumps"}, headers=auth).json()
        assert [i["id"] for i in found["items"]] == [archive["sealed"]]
        assert "<mark>" in found["items"][0]["snippet_html"] and "fox" in found["items"][0]["snippet"]
        assert c.get("/api/v1/search", params={"q": "brown fox", "tag": "nope"}, headers=auth).json()["items"] == []
        log_in(c)
        assert archive["sealed"] in c.get("/", params={"q": "lazy dog"}).text
        assert archive["sealed"] not in c.get("/", params={"q": "lazy cat"}).text
        assert archive["started"] in c.get("/", params={"status": "started"}).text
        assert archive["sealed"] not in c.get("/", params={"status": "started"}).text
        assert archive["sealed"] in c.get("/", params={"domain": "site.test"}).text
        assert archive["sealed"] not in c.get("/", params={"domain": "other.test"}).text


def test_filters_with_nul_or_control_characters_find_what_their_clean_form_finds(archive):
    """Postgres refuses NUL in a query's text: every filter is cleaned where it enters (a tag as
    tags are stored), so such input gets the list its cleaned form gets, never a 500."""
    token = create_token(archive["db"], "t", scope="read")
    auth = {"Authorization": f"Bearer {token}"}
    with client(archive) as c:
        found = c.get("/api/v1/search", params={"q": "brown\x00 fox", "tag": "\x00"}, headers=auth)
        assert found.status_code == 200, found.text
        assert [i["id"] for i in found.json()["items"]] == [archive["sealed"]]
        none = c.get("/api/v1/search", params={"q": "brown fox", "tag": "no\x00pe\x07"}, headers=auth)
        assert none.status_code == 200 and none.json()["items"] == []
        log_in(c)
        for key in ("q", "tag", "status", "domain", "crawl_id"):
            page = c.get("/", params={key: "site\x00.test\x1b"})
            assert page.status_code == 200, (key, page.text[-500:])
        assert archive["sealed"] in c.get("/", params={"domain": "site.test\x00"}).text
        assert archive["sealed"] not in c.get("/", params={"domain": "other\x00.test"}).text


def test_tags_are_edited_on_the_snapshot_page(archive):
    with client(archive) as c:
        log_in(c)
        token = csrf(c, f"/snapshots/{archive['sealed']}")
        response = c.post(
            f"/snapshots/{archive['sealed']}/tags",
            data={"tags": "news, birds", "_csrf_token": token},
            headers={"hx-request": "true"},
        )
        assert response.status_code == 201 or response.status_code == 200
        assert "birds" in response.text
        assert archive["sealed"] in c.get("/", params={"tag": "birds"}).text
        assert archive["sealed"] not in c.get("/", params={"tag": "cats"}).text


def test_delete_removes_rows_files_and_search_entry_but_never_a_started_snapshot(archive):
    token = create_token(archive["db"], "t")
    auth = {"Authorization": f"Bearer {token}"}
    with client(archive) as c:
        assert c.delete(f"/api/v1/snapshots/{archive['started']}", headers=auth).status_code == 409
        assert c.delete(f"/api/v1/snapshots/{archive['sealed']}", headers=auth).status_code == 204
        assert c.delete(f"/api/v1/snapshots/{archive['sealed']}", headers=auth).status_code == 404
        assert c.get("/api/v1/search", params={"q": "brown fox"}, headers=auth).json()["items"] == []
    assert not archive["root"].exists()
    assert (archive["data_dir"] / "index.sqlite3").exists()
    with archive["db"].read() as s:
        from sqlalchemy import select

        assert s.get(Snapshot, archive["started"]) is not None
        assert list(s.scalars(select(ArchiveResult.id).where(ArchiveResult.snapshot_id == archive["sealed"]))) == []
        assert list(s.scalars(select(Process.id).where(Process.snapshot_id == archive["sealed"]))) == []


def test_status_reports_disk_used_and_services(archive):
    token = create_token(archive["db"], "t", scope="read")
    with client(archive) as c:
        state = c.get("/api/v1/status", headers={"Authorization": f"Bearer {token}"}).json()
    assert state["disk_used_bytes"] > 0
    assert state["services"]["ingest"] is True and "result-projector" in state["services"]
    json.dumps(state)


def test_add_page_takes_urls_or_an_import_file_and_shows_the_crawl(archive):
    with client(archive) as c:
        log_in(c)
        token = csrf(c, "/add")
        bad = c.post("/add", data={"urls": "ftp://nope.test/", "depth": "0", "_csrf_token": token})
        assert bad.status_code == 422 and "urls[0]" in bad.text
        made = c.post(
            "/add",
            data={"urls": "", "depth": "1", "tags": "imported", "_csrf_token": token},
            files={"file": ("bookmarks.html", b'<DL><DT><A HREF="https://x.example/a">A</A></DL>', "text/html")},
            follow_redirects=False,
        )
        assert made.status_code == 303 and re.match(r"^/crawls/[0-9a-f]{32}$", made.headers["location"])
        page = c.get(made.headers["location"])
        assert page.status_code == 200 and 'id="crawl-status"' in page.text
        assert c.post(f"{made.headers['location']}/pause", data={"_csrf_token": token}).status_code == 503  # no NATS


def test_feeds_page_subscribes_and_removes(archive):
    with client(archive) as c:
        log_in(c)
        token = csrf(c, "/feeds")
        made = c.post(
            "/feeds",
            data={"url": "https://news.example/feed.xml", "schedule": "daily", "_csrf_token": token},
            follow_redirects=False,
        )
        assert made.status_code == 303
        page = c.get("/feeds").text
        assert "https://news.example/feed.xml" in page
        feed_id = re.search(r"/feeds/([0-9a-f]{32})/remove", page).group(1)
        assert c.post("/feeds", data={"url": "x", "schedule": "never", "_csrf_token": token}).status_code == 422
        c.post(f"/feeds/{feed_id}/remove", data={"_csrf_token": token})
        assert "https://news.example/feed.xml" not in c.get("/feeds").text


def test_archive_again_makes_a_new_crawl_and_list_pages_continue(archive):
    with client(archive) as c:
        log_in(c)
        token = csrf(c, f"/snapshots/{archive['sealed']}")
        again = c.post(
            f"/snapshots/{archive['sealed']}/archive-again", data={"_csrf_token": token}, follow_redirects=False
        )
        assert again.status_code == 303
        new_crawl = again.headers["location"].rsplit("/", 1)[1]
        assert new_crawl != archive["crawl"]
        with archive["db"].read() as s:
            crawl = s.get(Crawl, new_crawl)
            assert crawl.status == "queued" and crawl.seed_count == 1  # the runner takes it from here
        first = c.get("/", params={"crawl_id": archive["crawl"]}).text
        assert first.count('class="snapshot-row"') == 2 and "Older snapshots" not in first
        from boxcar.ingest.library import SnapshotFilter, SnapshotLibrary

        library = SnapshotLibrary(archive["db"], archive["data_dir"])
        one = library.list(SnapshotFilter(), limit=1, viewer=operator("system"))
        rest = c.get("/", params={"cursor": one.next_cursor}, headers={"hx-request": "true"})
        assert rest.status_code == 200 and "<html" not in rest.text  # the rows alone, for htmx to append
        assert rest.text.count('class="snapshot-row"') == 1 and one.rows[0].id not in rest.text


def test_status_answers_before_any_stream_exists(archive, nats_url):
    """A fresh NATS (no TASKS or EVENTS stream yet: nothing but ingest ever started) is a stack
    with nothing queued, not a server error."""
    token = create_token(archive["db"], "t", scope="read")
    with client(archive, nats_url=nats_url) as c:
        # ingest connects to NATS in the background (it serves while NATS is away): wait for
        # /healthz to say it is connected before asking for the status
        wait_until(lambda: c.get("/healthz").json()["nats"], 15, "ingest to connect to NATS", interval=0.02)
        response = c.get("/api/v1/status", headers={"Authorization": f"Bearer {token}"})
    assert response.status_code == 200, response.text
    state = response.json()
    assert state["nats"] is True and state["stalled_families"] == []
    assert all(f["pending"] == 0 for f in state["families"].values())
    assert state["services"]["crawl-runner"] is False


def test_bulk_actions_tag_untag_export_and_delete(archive):
    """The list's bulk actions: tags added and removed on many, a JSON Lines export, and a delete
    that keeps (and names) a snapshot being captured."""
    sealed, started = archive["sealed"], archive["started"]
    with client(archive) as c:
        log_in(c)
        token = csrf(c, "/")

        def bulk(action: str, ids: list[str], tags: str = ""):
            data = {"action": action, "ids": ids, "tags": tags, "next": "/", "_csrf_token": token}
            return c.post("/snapshots/bulk", data=data, follow_redirects=False)

        tagged = bulk("tag", [sealed, started], "one, two")
        assert tagged.status_code == 303 and "flash=Tagged+2." in tagged.headers["location"]
        assert "Tagged 2." in c.get(tagged.headers["location"]).text
        untagged = bulk("untag", [sealed], "one")
        assert untagged.status_code == 303
        exported = bulk("export", [sealed, started])
        assert exported.headers["content-type"].startswith("application/x-ndjson")
        records = {json.loads(line)["id"]: json.loads(line) for line in exported.text.splitlines()}
        assert set(records) == {sealed, started}
        assert records[sealed]["tags"] == ["two"] and sorted(records[started]["tags"]) == ["one", "two"]
        assert bulk("tag", [sealed]).status_code == 422  # no tags given
        assert bulk("tag", []).status_code == 422  # nothing ticked
        deleted = bulk("delete", [sealed, started])
        assert "Deleted+1.+1+being+captured+kept." in deleted.headers["location"]
        assert c.get(f"/snapshots/{sealed}").status_code == 404
        assert c.get(f"/snapshots/{started}").status_code == 200


def test_list_view_is_remembered_per_user(archive):
    with client(archive) as c:
        log_in(c)
        assert 'class="snapshot-table"' in c.get("/").text
        token = csrf(c, "/")
        response = c.post(
            "/preferences/list-view", data={"view": "grid", "next": "/", "_csrf_token": token}, follow_redirects=False
        )
        assert response.status_code == 303
    with client(archive) as other:  # another browser, the same person
        log_in(other)
        assert 'class="snap-grid"' in other.get("/").text


def test_metrics_parse_and_move_with_the_archive_and_requests(archive):
    """``/metrics`` parses with prometheus_client's parser; the stack's gauges match the database
    and the HTTP counter of a route moves with requests to it; a token is needed."""
    from prometheus_client.parser import text_string_to_metric_families

    token = create_token(archive["db"], "prometheus", scope="read")
    auth = {"Authorization": f"Bearer {token}"}

    def scrape(c) -> dict[tuple[str, tuple], float]:
        response = c.get("/metrics", headers=auth)
        assert response.status_code == 200 and response.headers["content-type"].startswith("text/plain")
        return {
            (sample.name, tuple(sorted(sample.labels.items()))): sample.value
            for family in text_string_to_metric_families(response.text)
            for sample in family.samples
        }

    def requests_to_status(samples) -> float:
        return sum(
            v
            for (name, labels), v in samples.items()
            if name == "litestar_requests_total" and ("path", "/api/v1/status") in labels
        )

    with client(archive) as c:
        assert c.get("/metrics").status_code == 401
        first = scrape(c)
        assert first[("boxcar_snapshots", (("status", "sealed"),))] == 1
        assert first[("boxcar_snapshots", (("status", "started"),))] == 1
        assert first[("boxcar_service_up", (("service", "ingest"),))] == 1
        assert any(name == "process_resident_memory_bytes" for name, _ in first)
        for _ in range(3):
            c.get("/api/v1/status", headers=auth)
        second = scrape(c)
        assert requests_to_status(second) - requests_to_status(first) == 3

        # a form post without its CSRF token: Litestar's CSRFMiddleware raises, and the request is
        # counted with the 403 it got (Litestar alone counted it as a 200)
        def logins(samples, metric: str = "litestar_requests_total") -> Counter[str]:
            by_status: Counter[str] = Counter()  # the registry is the process's: other tests count too
            for (name, labels), v in samples.items():
                if name == metric and ("path", "/login") in labels:
                    by_status[dict(labels)["status_code"]] += v
            return by_status

        refused = c.post("/login", data={"username": "alice", "password": PASSWORD}, follow_redirects=False)
        assert refused.status_code == 403
        third = scrape(c)
        counted = logins(third)
        counted.subtract(logins(second))
        assert +counted == Counter({"403": 1})
        timed = logins(third, "litestar_request_duration_seconds_sum")
        assert timed["403"] > logins(second, "litestar_request_duration_seconds_sum")["403"]  # not 0 s


def test_a_later_snapshot_shows_what_changed_in_the_text(archive):
    """A second snapshot of the same URL: its page's "what changed" section diffs the readable
    texts (lines added and removed, the earlier snapshot linked); the first has nothing to compare."""
    db, sealed = archive["db"], archive["sealed"]
    later = new_hex("later")
    with db.write() as s:
        first = s.get(Snapshot, sealed)
        again = Crawl.new(user="system", first_url=first.url, seed_count=1, now=utcnow())  # archived again
        s.add(again)
        s.flush()
        s.add(
            Snapshot(
                id=later,
                crawl_id=again.id,
                url=first.url,
                url_hash=first.url_hash,
                status=Status.SEALED,
                title="Page 1 again",
                domain="site.test",
                created_at=first.created_at + timedelta(days=1),
                output_dir=snapshot_dir("system", utcnow(), first.url, later),
            )
        )
        s.flush()  # the snapshot's row before its result's (the foreign key)
        s.add(
            ArchiveResult(
                id=new_hex("later-text"),
                snapshot_id=later,
                plugin="htmltotext",
                hook_name="on_Snapshot__htmltotext",
                status="succeeded",
                output_files={"htmltotext.txt": {"size": 10}},
            )
        )
        output_dir = s.get(Snapshot, later).output_dir
    (archive["data_dir"] / output_dir / "htmltotext").mkdir(parents=True)
    (archive["data_dir"] / output_dir / "htmltotext" / "htmltotext.txt").write_text(
        "The quick brown fox jumps over the lazy dog\nA new paragraph appeared"
    )
    with client(archive) as c:
        log_in(c)
        assert 'id="changes"' in c.get(f"/snapshots/{later}").text
        diff = c.get(f"/snapshots/{later}/changes").text
        assert '+1</strong> / <strong class="diff-removed">−0' in diff and "A new paragraph appeared" in diff
        assert f'href="/snapshots/{sealed}"' in diff
        assert "No earlier snapshot" in c.get(f"/snapshots/{sealed}/changes").text
