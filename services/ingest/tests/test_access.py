"""Who sees what (issue 28): every API endpoint and every UI page, asked by the owner, another
member, nobody, a public-link holder and a member a share was made for.

Alice (a member) owns a sealed snapshot with files, a tag, a search entry, a crawl, a feed, a URL
schedule and an API token; Bob is another member; Root an admin. Every route of the app must be
in ``ROUTES`` (a new route fails the test until its expectations are written down), and for every
route Bob and nobody get nothing of Alice's: the answer is a 404, 401, 403 or login redirect, or
a page that holds none of her markers (URL, title, text, tag, feed, token). The owner gets hers.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from litestar.testing import TestClient
from sqlalchemy import func, select

from boxcar.ingest import access
from boxcar.ingest.api.auth import create_token
from boxcar.ingest.app import create_app
from boxcar.ingest.web import accounts
from boxcar.result_projector import fulltext
from boxcar.shared.archive_store import ArchiveStore
from boxcar.shared.clock import utcnow
from boxcar.shared.db import Database, attach_tags
from boxcar.shared.db.models import (
    ArchiveResult,
    Crawl,
    CrawlSchedule,
    Snapshot,
    Status,
    Webhook,
    WebhookDelivery,
    url_hash,
)
from boxcar.shared.messages import Seed
from boxcar.shared.settings import Settings
from boxcar.shared.storage import snapshot_dir

PASSWORD = "correct horse battery"
CSRF = re.compile(r'name="_csrf_token" value="([^"]+)"')
#: what must never reach anyone but Alice (and the admins, and whom she shares with)
SECRET_URL = "http://alice.example/diary-entry"
SECRET_TITLE = "Alices quiet diary"
SECRET_TEXT = "marmalade lighthouse whisper"
SECRET_TAG = "alice-private"
SECRET_FEED = "http://alice.example/feed.xml"
SECRET_SCHEDULED = "http://alice.example/scheduled"
SECRET_HOOK = "http://alice.example/webhook"
MARKERS = (
    SECRET_URL,
    SECRET_TITLE,
    SECRET_TEXT,
    SECRET_TAG,
    SECRET_FEED,
    SECRET_SCHEDULED,
    SECRET_HOOK,
    "alice.example",
)


@pytest.fixture
def household(db: Database, tmp_path: Path):
    """Alice's archive (one sealed snapshot with files and text, a feed, a schedule, a token),
    Bob's (one snapshot), and an admin."""
    data_dir = tmp_path / "data"
    accounts.create_user(db, "alice", PASSWORD)
    accounts.create_user(db, "bob", PASSWORD)
    accounts.create_user(db, "root", PASSWORD, role="admin")
    now = utcnow()
    ids = {}
    with db.write() as s:
        for user, url, title in (("alice", SECRET_URL, SECRET_TITLE), ("bob", "http://bob.example/", "Bobs page")):
            crawl = Crawl.new(user=user, first_url=url, seed_count=1, now=now)
            crawl.status = Status.SEALED
            s.add(crawl)
            s.flush()
            sid = ("a" if user == "alice" else "b") * 32
            s.add(
                Snapshot(
                    id=sid,
                    crawl_id=crawl.id,
                    url=url,
                    url_hash=url_hash(Seed.parse(url).url),
                    status=Status.SEALED,
                    title=title,
                    domain=url.split("/")[2],
                    output_dir=snapshot_dir(user, now, url, sid),
                )
            )
            s.flush()
            s.add(
                ArchiveResult(
                    id=sid[:31] + "1",
                    snapshot_id=sid,
                    plugin="htmltotext",
                    hook_name="on_Snapshot__htmltotext",
                    status="succeeded",
                    output_files={"htmltotext.txt": {"size": 10, "mimetype": "text/plain"}},
                )
            )
            root = data_dir / snapshot_dir(user, now, url, sid)
            (root / "htmltotext").mkdir(parents=True)
            (root / "htmltotext" / "htmltotext.txt").write_text(
                f"{SECRET_TEXT} on {url}" if user == "alice" else "an ordinary page of bob"
            )
            ids[user] = {"snapshot": sid, "crawl": crawl.id, "root": root}
        attach_tags(s, {ids["alice"]["snapshot"]: [SECRET_TAG]})
        for kind, url in (("feed", SECRET_FEED), ("schedule", SECRET_SCHEDULED)):
            schedule_id = ("f" if kind == "feed" else "e") * 32
            s.add(
                CrawlSchedule(
                    id=schedule_id,
                    created_by="alice",
                    schedule="@daily",
                    status="queued",
                    template={"urls": [{"url": url, "credentials": ""}]} if kind == "schedule" else {},
                    feed_url=url if kind == "feed" else None,
                )
            )
            ids["alice"][kind] = schedule_id
        # her webhook, and one delivery of it (its log names her snapshot's URL)
        s.add(Webhook(id="d" * 32, owner="alice", url=SECRET_HOOK, secret_sealed="x", events=["snapshot.sealed"]))
        s.flush()
        s.add(
            WebhookDelivery(
                id="c" * 31 + "d",
                webhook_id="d" * 32,
                event="snapshot.sealed",
                event_key="snapshot.sealed:" + "a" * 32,
                payload={"snapshot": {"url": SECRET_URL}},
                last_error=f"HTTP 500 from {SECRET_HOOK}",
            )
        )
        ids["alice"]["webhook"] = "d" * 32
    fulltext.index_snapshots(db, ArchiveStore.local(data_dir), [ids["alice"]["snapshot"], ids["bob"]["snapshot"]])
    tokens = {
        "alice": create_token(db, "alice's script", owner="alice"),
        "bob": create_token(db, "bob's script", owner="bob"),
        "root": create_token(db, "root's script", owner="root"),
    }
    with db.read() as s:
        from boxcar.shared.db.models import ApiToken

        ids["alice"]["token"] = s.scalar(select(ApiToken.id).where(ApiToken.owner == "alice"))
    return {"db": db, "data_dir": data_dir, "ids": ids, "tokens": tokens}


def client(household, **settings) -> TestClient:
    settings.setdefault("nats_url", "nats://127.0.0.1:9")
    app = create_app(Settings(data_dir=household["data_dir"], **settings), household["db"])
    return TestClient(app, base_url="http://boxcar.lan")


def log_in(c: TestClient, name: str) -> None:
    token = CSRF.search(c.get("/login").text).group(1)
    response = c.post(
        "/login",
        data={"username": name, "password": PASSWORD, "_csrf_token": token, "next": "/"},
        follow_redirects=False,
    )
    assert response.status_code == 303, response.text


def csrf_of(c: TestClient) -> str:
    found = CSRF.search(c.get("/login").text)
    return found.group(1) if found else ""


def fill(path: str, ids: dict) -> str:
    """A route's path with Alice's things in its parameters."""
    alice = ids["alice"]
    values = {
        "snapshot_id": alice["snapshot"],
        "crawl_id": alice["crawl"],
        "feed_id": alice["feed"],
        "schedule_id": alice["schedule"],
        "token_id": alice["token"],
        "path": "htmltotext/htmltotext.txt",
        "format": "jsonl",
        "action": "pause",
        "name": "ui.js",
        "username": "alice",
        "share_id": "0" * 32,
        "token": "x" * 43,
        "webhook_id": alice["webhook"],
    }
    return re.sub(r"\{(\w+)(?::\w+)?\}", lambda m: values[m.group(1)], path)


#: every route, and what it is: "read" (answers with the archive's content), "write" (changes
#: it), or "public" (holds nothing of anyone's: health, schema, static files, login)
ROUTES = {
    "/": "read",
    "/add": "read",
    "/add/preview": "write",
    "/admin/users": "read",
    "/admin/users/{username:str}/{action:str}": "write",
    "/api": "public",
    "/api/v1/auth/check_api_token": "public",
    "/api/v1/cli/add": "write",
    "/api/v1/cli/remove": "write",
    "/api/v1/crawls": "write",
    "/api/v1/crawls/{crawl_id:str}": "read",
    "/api/v1/crawls/{crawl_id:str}/{action:str}": "write",
    "/api/v1/exports/{format:str}": "read",
    "/api/v1/feeds": "read",
    "/api/v1/feeds/{feed_id:str}": "read",
    "/api/v1/feeds/{feed_id:str}/{action:str}": "write",
    "/api/v1/imports": "write",
    "/api/v1/schedules": "read",
    "/api/v1/schedules/{schedule_id:str}": "write",
    "/api/v1/schedules/{schedule_id:str}/{action:str}": "write",
    "/api/v1/search": "read",
    "/api/v1/snapshots": "read",
    "/api/v1/snapshots/{snapshot_id:str}": "write",
    "/api/v1/status": "read",
    "/api/v1/webhooks": "read",
    "/api/v1/webhooks/{webhook_id:str}": "write",
    "/api/v1/webhooks/{webhook_id:str}/deliveries": "read",
    "/archive/{snapshot_id:str}/{path:path}": "read",
    "/crawls": "read",
    "/crawls/{crawl_id:str}": "read",
    "/crawls/{crawl_id:str}/progress": "read",
    "/crawls/{crawl_id:str}/trace": "read",
    "/crawls/{crawl_id:str}/{action:str}": "write",
    "/export/{format:str}": "read",
    "/favicon.ico": "public",
    "/feeds": "read",
    "/feeds/{feed_id:str}/{action:str}": "write",
    "/healthz": "public",
    "/login": "public",
    "/login/oidc": "public",
    "/login/oidc/callback": "public",
    "/logout": "public",
    "/manifest.webmanifest": "public",
    "/metrics": "read",
    "/preferences/list-view": "write",
    "/s/{token:str}": "public",
    "/schema": "public",
    "/settings": "read",
    "/settings/tokens": "write",
    "/settings/webhooks": "write",
    "/settings/webhooks/{webhook_id:str}/delete": "write",
    "/settings/tokens/{token_id:str}/revoke": "write",
    "/shares": "write",
    "/shares/{share_id:str}/revoke": "write",
    "/snapshots/bulk": "write",
    "/snapshots/{snapshot_id:str}": "read",
    "/snapshots/{snapshot_id:str}/archive-again": "write",
    "/snapshots/{snapshot_id:str}/changes": "read",
    "/snapshots/{snapshot_id:str}/delete": "write",
    "/snapshots/{snapshot_id:str}/replay": "read",
    "/snapshots/{snapshot_id:str}/tags": "write",
    "/static/{file_path:path}": "public",
    "/sw.js": "public",
}


#: pages with a parameter that answer anyone with what is theirs (an export of their own
#: snapshots) or with nothing (a trace or a diff of something they may not read is empty)
ANSWER_WITHOUT_HERS = (
    "/crawls/{crawl_id:str}/trace",
    "/snapshots/{snapshot_id:str}/changes",
    "/export/{format:str}",
    "/api/v1/exports/{format:str}",
)


def routes_of(app) -> dict[str, set[str]]:
    """Every path of the app with its methods (OpenAPI's own pages and HEAD/OPTIONS left out)."""
    found: dict[str, set[str]] = {}
    for route in app.routes:
        if route.path.startswith("/schema/"):
            continue
        methods = {m for m in getattr(route, "methods", set()) if m not in ("HEAD", "OPTIONS")}
        if methods:
            found.setdefault(route.path, set()).update(methods)
    return found


def leaks(text: str) -> list[str]:
    return [m for m in MARKERS if m in text]


def ask(c: TestClient, method: str, path: str, *, token: str = "", csrf: str = "") -> tuple[int, str]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    if method == "GET":
        r = c.get(path, headers=headers, follow_redirects=False)
    else:
        body = {"_csrf_token": csrf, "ids": "a" * 32, "tags": "x", "action": "tag", "snapshots": "delete"}
        if path.startswith("/api/"):
            r = c.request(method, path, headers=headers, json={"urls": ["http://x.example/"]}, follow_redirects=False)
        else:
            r = c.request(method, path, headers=headers, data=body, follow_redirects=False)
    return r.status_code, r.text


def test_every_route_is_in_the_matrix(household):
    app = create_app(Settings(data_dir=household["data_dir"], nats_url="nats://127.0.0.1:9"), household["db"])
    found = set(routes_of(app))
    assert found - set(ROUTES) == set(), "new routes: say who may use them in ROUTES"
    assert set(ROUTES) - found == set(), "routes that are gone"


@pytest.mark.parametrize("caller", ["bob", "nobody", "bob-with-token", "link-holder", "bob-with-a-share"])
def test_nobody_but_the_owner_gets_anything_of_hers(household, caller):
    """Every route, every method: Bob (a member, by session or by his token), nobody, somebody
    holding a public link to Bob's snapshot, and Bob with Root's archive shared with every user
    get a refusal or an answer without any of Alice's markers; her snapshot, files, crawl, feed
    and schedule survive every write they try."""
    ids = household["ids"]
    db = household["db"]
    with client(household) as c:
        if caller in ("bob", "bob-with-a-share"):
            log_in(c, "bob")
        if caller == "bob-with-a-share":
            access.create_share(db, access.Viewer(username="root", role="admin"), "archive", "", "users")
        if caller == "link-holder":
            bob = access.Viewer(username="bob", role="member")
            link = access.create_share(db, bob, "snapshot", ids["bob"]["snapshot"], "public")
            assert c.get(f"/s/{link.token}", follow_redirects=False).status_code == 303
            assert "Bobs page" in c.get(f"/snapshots/{ids['bob']['snapshot']}").text
        token = household["tokens"]["bob"] if caller == "bob-with-token" else ""
        csrf = csrf_of(c)
        for path, methods in sorted(routes_of(c.app).items()):
            if ROUTES[path] == "public" and path != "/api/v1/cli/add":
                continue
            url = fill(path, ids)
            for method in sorted(methods):
                status, text = ask(c, method, url, token=token, csrf=csrf)
                assert status < 500, (method, url, status, text[:300])
                assert not leaks(text), (caller, method, url, status, leaks(text))
                if ROUTES[path] == "read" and "{" in path and status == 200:
                    # a page about one of Alice's things answered: only the parts that are not hers
                    assert path in ANSWER_WITHOUT_HERS, url
    # everything of Alice's is still there
    db = household["db"]
    with db.read() as s:
        assert s.get(Snapshot, ids["alice"]["snapshot"]) is not None
        assert s.get(CrawlSchedule, ids["alice"]["feed"]).status == "queued"
        assert s.get(CrawlSchedule, ids["alice"]["schedule"]) is not None
        assert s.get(Webhook, ids["alice"]["webhook"]) is not None
        tags = s.scalar(select(func.count()).select_from(Snapshot).where(Snapshot.id == ids["alice"]["snapshot"]))
        assert tags == 1
    assert (ids["alice"]["root"] / "htmltotext" / "htmltotext.txt").exists()


def test_what_may_not_be_known_is_a_404(household):
    """Bob asking for Alice's things by id: 404, exactly as for ids that do not exist."""
    ids = household["ids"]["alice"]
    bob = household["tokens"]["bob"]
    with client(household) as c:
        api = {"Authorization": f"Bearer {bob}"}
        for path in (
            f"/api/v1/crawls/{ids['crawl']}",
            f"/api/v1/feeds/{ids['feed']}",
            "/api/v1/status",
        ):
            assert c.get(path, headers=api).status_code == 404, path
        assert c.delete(f"/api/v1/snapshots/{ids['snapshot']}", headers=api).status_code == 404
        assert c.delete(f"/api/v1/schedules/{ids['schedule']}", headers=api).status_code == 404
        assert c.delete(f"/api/v1/webhooks/{ids['webhook']}", headers=api).status_code == 404
        assert c.get(f"/api/v1/webhooks/{ids['webhook']}/deliveries", headers=api).status_code == 404
        assert c.get("/api/v1/webhooks", headers=api).json() == []
        assert c.post(f"/api/v1/crawls/{ids['crawl']}/cancel", headers=api).status_code == 404
        log_in(c, "bob")
        for path in (
            f"/snapshots/{ids['snapshot']}",
            f"/archive/{ids['snapshot']}/htmltotext/htmltotext.txt",
            f"/crawls/{ids['crawl']}",
            "/admin/users",
        ):
            assert c.get(path).status_code == 404, path
        assert c.get(f"/snapshots/{'c' * 32}").status_code == 404  # the same as one that does not exist


def test_the_owner_and_the_admin_get_everything_of_hers(household):
    ids = household["ids"]["alice"]
    for name in ("alice", "root"):
        token = household["tokens"][name]
        api = {"Authorization": f"Bearer {token}"}
        with client(household) as c:
            assert SECRET_URL in c.get("/api/v1/snapshots", headers=api).text
            assert ids["snapshot"] in c.get("/api/v1/search", params={"q": "marmalade"}, headers=api).text
            assert c.get(f"/api/v1/crawls/{ids['crawl']}", headers=api).status_code == 200
            assert SECRET_FEED in c.get("/api/v1/feeds", headers=api).text
            assert SECRET_SCHEDULED in c.get("/api/v1/schedules", headers=api).text
            assert SECRET_HOOK in c.get("/api/v1/webhooks", headers=api).text
            log = c.get(f"/api/v1/webhooks/{ids['webhook']}/deliveries", headers=api).json()
            assert [d["status"] for d in log] == ["pending"]
            assert SECRET_URL in c.get("/api/v1/exports/jsonl", headers=api).text
            log_in(c, name)
            assert SECRET_TITLE in c.get("/").text
            assert SECRET_TITLE in c.get("/", params={"q": "lighthouse"}).text
            assert SECRET_TAG in c.get(f"/snapshots/{ids['snapshot']}").text
            assert SECRET_TEXT in c.get(f"/archive/{ids['snapshot']}/htmltotext/htmltotext.txt").text
            assert ids["crawl"] in c.get("/crawls").text
            assert SECRET_FEED in c.get("/feeds").text
    with client(household) as c:
        log_in(c, "alice")
        assert "Bobs page" not in c.get("/").text  # and hers only
        assert (
            c.get("/api/v1/status", headers={"Authorization": f"Bearer {household['tokens']['alice']}"}).status_code
            == 404
        )
        assert (
            "alice" in c.get("/api/v1/status", headers={"Authorization": f"Bearer {household['tokens']['root']}"}).text
        )


def test_sharing_with_users_and_by_public_link_and_revoking(household):
    """A share with every user lets Bob read that one snapshot (list, search, page, file) and no
    more; a public link lets anybody read it; revoking ends both at once."""
    db = household["db"]
    ids = household["ids"]["alice"]
    alice = access.Viewer(username="alice", role="member")
    with client(household) as c:
        log_in(c, "bob")
        assert SECRET_TITLE not in c.get("/").text
        share = access.create_share(db, alice, "snapshot", ids["snapshot"], "users")
        assert SECRET_TITLE in c.get("/").text
        assert SECRET_TITLE in c.get("/", params={"q": "marmalade"}).text
        assert c.get(f"/archive/{ids['snapshot']}/htmltotext/htmltotext.txt").status_code == 200
        page = c.get(f"/snapshots/{ids['snapshot']}").text
        assert SECRET_TITLE in page and 'id="delete"' not in page  # Bob reads it, can't delete it
        assert (
            c.post(
                f"/snapshots/{ids['snapshot']}/delete", data={"_csrf_token": csrf_of(c)}, follow_redirects=False
            ).status_code
            == 404
        )
        assert access.revoke_share(db, alice, share.id)
        assert c.get(f"/snapshots/{ids['snapshot']}").status_code == 404

    # Bob can't share Alice's snapshot
    with pytest.raises(access.AccessError):
        access.create_share(db, access.Viewer(username="bob", role="member"), "snapshot", ids["snapshot"], "public")

    public = access.create_share(db, alice, "tag", SECRET_TAG, "public")
    assert len(public.token) >= 40
    with client(household) as c:  # nobody, with the link
        assert c.get(f"/snapshots/{ids['snapshot']}", follow_redirects=False).status_code == 303  # to the login
        opened = c.get(f"/s/{public.token}", follow_redirects=False)
        assert opened.status_code == 303 and opened.headers["location"] == f"/?tag={SECRET_TAG}"
        assert SECRET_TITLE in c.get(opened.headers["location"]).text
        assert c.get(f"/archive/{ids['snapshot']}/htmltotext/htmltotext.txt").status_code == 200
        assert "Bobs page" not in c.get("/").text
        assert c.get(f"/snapshots/{household['ids']['bob']['snapshot']}").status_code == 404
        access.revoke_share(db, alice, public.id)
        assert c.get(f"/archive/{ids['snapshot']}/htmltotext/htmltotext.txt").status_code in (303, 401, 404)
        assert c.get(f"/s/{public.token}", follow_redirects=False).status_code == 404


def test_public_reads_are_the_admins_archives_only(db: Database, tmp_path: Path, household):
    """``PUBLIC_READS=true``: nobody reads what admins (and ``ARCHIVE_USER``) archived, never a
    member's."""
    with client(household, public_reads=True) as c:
        listing = c.get("/api/v1/snapshots").text
        assert SECRET_URL not in listing and "bob.example" not in listing
    accounts.set_role(household["db"], "alice", "admin")
    with client(household, public_reads=True) as c:
        assert SECRET_URL in c.get("/api/v1/snapshots").text


def test_only_new_is_per_user_and_files_go_under_each_users_directory(household):
    """Two users add the same URL: two crawls under ``archive/users/<name>/``; Alice's ``ONLY_NEW``
    skips what she archived, Bob's does not."""
    tokens = household["tokens"]
    with client(household) as c:
        made = {}
        for name in ("alice", "bob"):
            r = c.post(
                "/api/v1/crawls",
                json={"urls": [SECRET_URL], "only_new": True},
                headers={"Authorization": f"Bearer {tokens[name]}"},
            )
            assert r.status_code == 201, r.text
            made[name] = r.json()
    assert made["alice"]["skipped_existing"] == 1 and made["alice"]["urls"] == 0  # hers was archived
    assert made["bob"]["skipped_existing"] == 0 and made["bob"]["urls"] == 1
    with household["db"].read() as s:
        crawl = s.get(Crawl, made["bob"]["id"])
        assert crawl.created_by == "bob" and crawl.output_dir.startswith("archive/users/bob/")


def test_quotas_refuse_a_crawl_over_a_limit_and_say_which(household):
    from boxcar.ingest import quotas

    quotas.set_limits(household["db"], "bob", snapshots_per_day=2)
    api = {"Authorization": f"Bearer {household['tokens']['bob']}"}
    with client(household) as c:
        r = c.post("/api/v1/crawls", json={"urls": [f"http://x.example/{i}" for i in range(3)]}, headers=api)
        assert r.status_code == 429 and "2 a day" in r.json()["detail"], r.text
        assert c.post("/api/v1/crawls", json={"urls": ["http://x.example/1"]}, headers=api).status_code == 201
    used = {u.username: u for u in quotas.usage(household["db"])}
    assert used["bob"].max_snapshots_per_day == 2 and used["alice"].snapshots == 1


def test_removing_a_user_asks_and_does_what_was_chosen(household):
    db = household["db"]
    ids = household["ids"]
    with pytest.raises(accounts.AccountError):
        accounts.remove_user(db, "bob", "")
    done = accounts.remove_user(db, "bob", "reassign", to="alice")
    assert done is not None and done.snapshots == 1
    with db.read() as s:
        assert s.get(Crawl, ids["bob"]["crawl"]).created_by == "alice"
    assert ids["bob"]["root"].exists()  # nothing moved on disk
    assert access.live_share_ids(db, []) == ()
    # the removed user's tokens are revoked
    with client(household) as c:
        assert (
            c.get("/api/v1/snapshots", headers={"Authorization": f"Bearer {household['tokens']['bob']}"}).status_code
            == 401
        )


def test_boxcar_user_commands(tmp_path):
    """``boxcar user create --admin``, ``list``, ``limits``, ``disable``, ``remove``: removing asks
    what happens to the snapshots and refuses to guess."""
    from click.testing import CliRunner

    from boxcar.cli.main import cli

    data = ["--data-dir", str(tmp_path / "data")]
    run = CliRunner().invoke
    env = {"BOXCAR_PASSWORD": PASSWORD, "DATABASE_URL": ""}
    assert run(cli, ["user", "create", "root", *data], env=env).exit_code == 0  # the first: an admin
    assert run(cli, ["user", "create", "carol", *data], env=env).exit_code == 0
    assert run(cli, ["user", "create", "dave", "--admin", *data], env=env).exit_code == 0
    assert run(cli, ["user", "role", "dave", "member", *data]).exit_code == 0
    assert run(cli, ["user", "limits", "carol", "--per-day", "5", *data]).exit_code == 0
    assert run(cli, ["user", "disable", "carol", *data]).exit_code == 0
    listed = run(cli, ["user", "list", "--json", *data])
    rows = {r["username"]: r for r in map(__import__("json").loads, listed.output.splitlines())}
    assert rows["root"]["role"] == "admin" and rows["carol"]["role"] == "member" and rows["dave"]["role"] == "member"
    assert rows["carol"]["max_snapshots_per_day"] == 5 and rows["carol"]["active"] is False
    asked = run(cli, ["user", "remove", "carol", "--yes", *data], input="\n")  # no answer: nothing done
    assert asked.exit_code != 0 and "keep, reassign or delete" in asked.output
    done = run(cli, ["user", "remove", "carol", "--snapshots", "reassign", "--to", "root", "--yes", *data])
    assert done.exit_code == 0, done.output
    assert "carol" not in run(cli, ["user", "list", "--json", *data]).output


def test_the_operators_name_is_nobodys_and_removed_names_inherit_nothing(household):
    """No person may be called ``ARCHIVE_USER`` (they would own the operator's archive), by any
    way in (password account, single sign-on, proxy header); a removed user's kept snapshots go to
    a name no user can have, so whoever takes the name later gets none of them; a disabled
    user's shares pause; sharing a tag reveals nothing about other users' tags."""
    db = household["db"]
    ids = household["ids"]
    for name in ("system", "System"):
        with pytest.raises(accounts.AccountError):
            accounts.create_user(db, name, PASSWORD)
        assert accounts.sso_user_id(db, name, create=True, issuer="https://sso.example.lan", subject=name) is None
    assert accounts.header_viewer(db, "system", True) == access.ANONYMOUS
    operator_token = create_token(db, "cli", owner="system")
    with client(household) as c:
        api = {"Authorization": f"Bearer {operator_token}"}
        assert SECRET_URL in c.get("/api/v1/snapshots", headers=api).text  # the operator's token: an admin

    alice = access.Viewer(username="alice", role="member")
    with pytest.raises(access.AccessError) as theirs:
        access.create_share(db, access.Viewer(username="bob", role="member"), "tag", SECRET_TAG, "users")
    with pytest.raises(access.AccessError) as nothing:
        access.create_share(db, access.Viewer(username="bob", role="member"), "tag", "no-such-tag", "users")
    assert str(theirs.value).replace(SECRET_TAG, "X") == str(nothing.value).replace("no-such-tag", "X")

    access.create_share(db, alice, "snapshot", ids["alice"]["snapshot"], "users")
    bob = access.Viewer(username="bob", role="member")
    library_condition = access.readable_snapshots(bob)
    with db.read() as s:
        assert s.scalar(select(func.count()).select_from(Snapshot).where(library_condition)) == 2
    accounts.set_active(db, "alice", False)
    with db.read() as s:
        assert s.scalar(select(func.count()).select_from(Snapshot).where(access.readable_snapshots(bob))) == 1
    accounts.set_active(db, "alice", True)

    accounts.remove_user(db, "alice", "keep")
    accounts.create_user(db, "alice", PASSWORD)  # someone new takes the name
    with client(household) as c:
        log_in(c, "alice")
        assert SECRET_TITLE not in c.get("/").text
        assert c.get(f"/snapshots/{ids['alice']['snapshot']}").status_code == 404
    with db.read() as s:
        kept = s.get(Crawl, ids["alice"]["crawl"])
        assert kept is not None and kept.created_by == "~alice"  # kept, the admins' to see
