"""OpenID Connect login against a real OpenID provider, in a real browser.

The provider is panva's ``oidc-provider`` (an OpenID Certified OP, from the npm registry, kept in
``.cache/``) run by ``tests/oidc_provider/provider.mjs`` on a free loopback port: one client
(Boxcar's callback as its redirect URI), one account (``carol``), its development login and
consent pages. Boxcar's ingest runs alone (SQLite, no NATS) under its own uvicorn server.
Playwright drives Debian's Chromium (the system binary: no browser download).

- a person clicks "Sign in with single sign-on", signs in at the provider, consents, and lands
  back on the page they asked for, logged in as the provider's ``preferred_username`` (a user
  created on the way, whose password can never log in, bound to that provider account);
- another provider account whose ``preferred_username`` is the name of Boxcar's admin (who has a
  password) is refused with a sentence, and nobody is logged in or bound;
- a callback whose ``state`` was changed on the way back is refused (and logs nobody in), as is
  one the person cancelled at the provider;
- a provider that does not answer gives the login page with a 502 and a sentence, no traceback.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import parse_qsl, urlencode, urlsplit

import httpx
import pytest
from sqlalchemy import select

from boxcar.cli.stack import free_port
from boxcar.ingest import server as server_module
from boxcar.ingest.app import create_app
from boxcar.ingest.web import accounts
from boxcar.shared.db import Database
from boxcar.shared.db.models import User
from boxcar.shared.settings import Settings
from tests.helpers import CHROMIUM, chromium_browser, npm_tool, wait_until

playwright_api = pytest.importorskip("playwright.sync_api", reason="playwright (pip) is needed for browser tests")
OIDC_PROVIDER_VERSION = "9.13.3"
SCRIPT = Path(__file__).resolve().parent / "oidc_provider" / "provider.mjs"
CLIENT_ID, CLIENT_SECRET, ACCOUNT = "boxcar", "a client secret for tests", "carol"
#: a provider account whose owner chose, as its preferred_username, the name of Boxcar's admin
MALLORY, ADMIN = "mallory", "root"

pytestmark = [
    pytest.mark.skipif(not Path(CHROMIUM).exists(), reason=f"no Chromium at {CHROMIUM}"),
    pytest.mark.skipif(not shutil.which("node"), reason="node is needed to run the OpenID provider"),
]


def run_boxcar(port: int, data_dir: Path, **settings) -> tuple[server_module.Server, threading.Thread, Database]:
    config = Settings(data_dir=data_dir, nats_url="nats://127.0.0.1:9", **settings)
    db = Database(config.sqlalchemy_url)
    db.upgrade()
    http = server_module.server(create_app(config, db), "127.0.0.1", port, handle_signals=False)
    thread = threading.Thread(target=http.run, daemon=True)
    thread.start()
    wait_until(lambda: http.started or not thread.is_alive(), 20, "Boxcar to serve", interval=0.02)
    assert http.started, "Boxcar did not start"
    return http, thread, db


@pytest.fixture(scope="module")
def sso(tmp_path_factory) -> Iterator[dict]:
    """The provider and Boxcar, wired to each other; yields their URLs and Boxcar's database."""
    modules = npm_tool("oidc-provider", OIDC_PROVIDER_VERSION, "package.json").parents[1]
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    provider = subprocess.Popen(
        ["node", str(SCRIPT)],
        env={
            **os.environ,
            "OIDC_PROVIDER_MODULES": str(modules),
            "CLIENT_ID": CLIENT_ID,
            "CLIENT_SECRET": CLIENT_SECRET,
            "REDIRECT_URI": f"{base}/login/oidc/callback",
            "ACCOUNTS": json.dumps({ACCOUNT: ACCOUNT, MALLORY: ADMIN}),
        },
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        first = provider.stdout.readline()  # "issuer <url>" once it serves (EOF if it died)
        assert first.startswith("issuer "), f"the OpenID provider did not start: {first!r}"
        issuer = first.split()[1]
        http, thread, db = run_boxcar(
            port,
            tmp_path_factory.mktemp("sso") / "data",
            oidc_issuer=issuer,
            oidc_client_id=CLIENT_ID,
            oidc_client_secret=CLIENT_SECRET,
        )
        try:
            yield {"base": base, "issuer": issuer, "db": db}
        finally:
            http.should_exit = True
            thread.join(20)
            db.dispose()
    finally:
        provider.terminate()
        provider.wait(10)


@pytest.fixture(scope="module")
def browser() -> Iterator:
    with chromium_browser() as chromium:
        yield chromium


def sign_in_at_provider(page, issuer: str, login: str = ACCOUNT) -> None:
    """The provider's development login (any password) and consent pages."""
    page.wait_for_url(re.compile("^" + re.escape(issuer) + "/interaction/"))
    page.fill("input[name=login]", login)
    page.fill("input[name=password]", "any password works here")
    page.click("button[type=submit]")
    page.wait_for_selector("text=Continue")  # consent: the scopes Boxcar asks for
    page.click("button[type=submit]")


def test_single_sign_on_logs_in_through_the_provider(sso, browser):
    context = browser.new_context(base_url=sso["base"])
    page = context.new_page()
    page.goto("/crawls")  # a page behind the login
    page.wait_for_url(re.compile(r"/login\?next=%2Fcrawls$"))
    page.click("text=Sign in with single sign-on")
    sign_in_at_provider(page, sso["issuer"])
    page.wait_for_url(sso["base"] + "/crawls")
    assert page.locator("header").get_by_text(ACCOUNT, exact=True).count() == 1
    names = {c["name"] for c in context.cookies(sso["base"])}
    assert "boxcar_session" in names and "boxcar_oidc" not in names  # the flow's cookie is gone
    with sso["db"].read() as s:
        carol = s.scalar(select(User).where(User.username == ACCOUNT))
    assert carol is not None and carol.is_active and carol.last_login_at is not None
    assert (carol.oidc_issuer, carol.oidc_subject) == (sso["issuer"], ACCOUNT)  # the provider's sub
    assert accounts.authenticate(sso["db"], ACCOUNT, "any password works here") is None  # SSO only
    page.goto("/")
    assert page.locator("header").get_by_text(ACCOUNT, exact=True).count() == 1
    context.close()


def test_a_provider_account_named_like_the_admin_does_not_become_the_admin(sso, browser, tmp_path):
    """OpenID Connect Core §5.7: ``preferred_username`` is whatever the provider lets its owner
    choose. Mallory's is "root", Boxcar's admin, who has a password: refused, not logged in as root."""
    accounts.create_user(sso["db"], ADMIN, "the admin's own password", role="admin")
    context = browser.new_context(base_url=sso["base"])
    page = context.new_page()
    page.goto("/login")
    page.click("text=Sign in with single sign-on")
    with page.expect_response(lambda r: "/login/oidc/callback" in r.url) as answer:
        sign_in_at_provider(page, sso["issuer"], login=MALLORY)
    assert answer.value.status == 403
    page.wait_for_selector("text=may not sign in to any Boxcar user")
    page.screenshot(path=str(tmp_path / "refused.png"))
    assert "boxcar_session" not in {c["name"] for c in context.cookies(sso["base"])}
    assert page.goto("/crawls").url.startswith(sso["base"] + "/login")  # still nobody
    with sso["db"].read() as s:
        root = s.scalar(select(User).where(User.username == ADMIN))
    assert root is not None and (root.oidc_issuer, root.oidc_subject) == (None, None) and root.last_login_at is None
    context.close()


def intercept_redirect_back(page, sso: dict, change) -> None:
    """Route the provider's answers so its redirect back to Boxcar's callback goes through
    ``change(url) -> url | None`` (None: the browser stops there, on an empty page). Playwright
    routes only the first request of a redirect chain, so a routed request's redirects within the
    provider are followed here (with the browser context's cookies) and the browser gets the last
    one."""
    issuer = sso["issuer"]

    def handle(route) -> None:
        response = route.fetch(max_redirects=0)
        location = response.headers.get("location", "")
        while 300 <= response.status < 400 and location.startswith(("/", issuer + "/")):  # the provider's hops
            hop = issuer + location if location.startswith("/") else location
            response = page.context.request.get(hop, max_redirects=0)
            location = response.headers.get("location", "")
        if 300 <= response.status < 400 and location.startswith(sso["base"] + "/login/oidc/callback?"):
            changed = change(location)
            if changed is None:
                route.fulfill(status=200, body="stopped", content_type="text/plain")
            else:
                route.fulfill(status=303, headers={"location": changed})
            return
        route.fulfill(response=response)

    page.route(re.compile("^" + re.escape(issuer) + "/interaction/"), handle)


def test_a_tampered_state_is_refused(sso, browser):
    context = browser.new_context(base_url=sso["base"])
    page = context.new_page()

    def tamper(url: str) -> str:  # the provider's real answer, its state changed on the way back
        parts = urlsplit(url)
        query = dict(parse_qsl(parts.query))
        query["state"] = query["state"][::-1]
        return parts._replace(query=urlencode(query)).geturl()

    intercept_redirect_back(page, sso, tamper)
    page.goto("/login")
    page.click("#sso")
    sign_in_at_provider(page, sso["issuer"])
    page.wait_for_url(re.compile(r"/login/oidc/callback\?"))
    assert "not started here" in page.locator(".flash.error").inner_text()
    assert page.locator("header").get_by_text(ACCOUNT, exact=True).count() == 0
    assert "boxcar_session" not in {c["name"] for c in context.cookies(sso["base"])}
    page.goto("/crawls")  # still anonymous: back to the login
    assert "/login" in page.url
    context.close()


def test_the_same_callback_replayed_in_another_browser_is_refused(sso, browser):
    """A callback URL (code and state) taken to a browser that did not start the login: no flow
    cookie there, so nothing is exchanged."""
    context = browser.new_context(base_url=sso["base"])
    page = context.new_page()
    seen: list[str] = []
    intercept_redirect_back(page, sso, lambda url: seen.append(url))
    page.goto("/login")
    page.click("#sso")
    sign_in_at_provider(page, sso["issuer"])
    wait_until(lambda: seen, 20, "the provider's redirect back")
    context.close()
    other = browser.new_context(base_url=sso["base"])
    tab = other.new_page()
    response = tab.goto(seen[0])
    assert response is not None and response.status == 400
    assert "not started in this browser" in tab.locator(".flash.error").inner_text()
    other.close()


def test_cancelling_at_the_provider_shows_why(sso, browser):
    context = browser.new_context(base_url=sso["base"])
    page = context.new_page()
    page.goto("/login")
    page.click("#sso")
    page.wait_for_url(re.compile("^" + re.escape(sso["issuer"]) + "/interaction/"))
    page.click("text=[ Cancel ]")
    page.wait_for_url(re.compile(r"/login/oidc/callback\?"))
    assert "consent was denied" in page.locator(".flash.error").inner_text()
    assert "boxcar_session" not in {c["name"] for c in context.cookies(sso["base"])}
    context.close()


def test_a_provider_that_does_not_answer_gives_a_502_and_a_sentence(tmp_path):
    port, dead = free_port(), free_port()
    http, thread, db = run_boxcar(
        port, tmp_path / "data", oidc_issuer=f"http://127.0.0.1:{dead}", oidc_client_id=CLIENT_ID
    )
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", follow_redirects=False, timeout=30) as client:
            login = client.get("/login")
            assert "Sign in with single sign-on" in login.text
            response = client.get("/login/oidc", params={"next": "/crawls"})
            assert response.status_code == 502
            assert "could not be reached" in response.text and "Traceback" not in response.text
            assert 'name="next" value="/crawls"' in response.text
            # a callback nobody started
            response = client.get("/login/oidc/callback", params={"code": "x", "state": "y"})
            assert response.status_code == 400 and "not started in this browser" in response.text
    finally:
        http.should_exit = True
        thread.join(20)
        db.dispose()


def test_no_button_and_no_route_without_an_issuer(tmp_path):
    port = free_port()
    http, thread, db = run_boxcar(port, tmp_path / "data")
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", follow_redirects=False, timeout=30) as client:
            assert "single sign-on" not in client.get("/login").text
            assert client.get("/login/oidc").status_code == 404
    finally:
        http.should_exit = True
        thread.join(20)
        db.dispose()
