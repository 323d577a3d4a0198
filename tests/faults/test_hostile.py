"""Hostile URLs: the stack's own services, private and special addresses are never fetched —
directly, through a decimal-IP disguise, or by a redirect — unless the operator allows it
(``URL_ALLOW_PRIVATE`` for a LAN); the refusal is recorded with its reason."""

from __future__ import annotations

import time
from urllib.parse import quote, urlsplit

import httpx

from boxcar.shared.egress import RuntimePorts
from boxcar.shared.urls import canonicalize
from tests.fault_site import FaultSite
from tests.helpers import api, submit, wait_sealed, wait_until
from tests.listeners import CountingListener


def results_by_url(stack, crawl_id: str) -> dict[str, list[dict]]:
    items = api(stack).get("/api/v1/snapshots", params={"crawl_id": crawl_id}).json()["items"]
    return {item["url"]: item["results"] for item in items}


def test_private_addresses_are_refused_unless_allowed(sqlite_url, nats_url, make_stack):
    with FaultSite() as site:
        port = urlsplit(site.base).port
        stack = make_stack(sqlite_url, nats_url, families=["fetch"], env={"URL_ALLOW_PRIVATE": "false"})
        urls = [site.url("/items/private.html"), f"http://2130706433:{port}/items/decimal.html"]
        crawl_id = submit(stack, urls=urls, plugins=["wget"])
        wait_sealed(stack, crawl_id, timeout=120)
        for url, results in results_by_url(stack, crawl_id).items():
            assert results and all(r["status"] == "skipped" for r in results), (url, results)
            assert all("private or special-purpose address" in r["output_str"] for r in results)
        assert not site.hits, f"a private address was fetched: {dict(site.hits)}"


def test_the_stacks_own_services_are_refused_even_on_a_lan_and_after_a_redirect(sqlite_url, nats_url, make_stack):
    with FaultSite() as site:
        stack = make_stack(sqlite_url, nats_url, families=["fetch"])  # URL_ALLOW_PRIVATE=true: a LAN
        nats_http = nats_url.replace("nats://", "http://") + "/"
        redirect = site.url("/redirect-to?u=" + quote(nats_http, safe=""))
        crawl_id = submit(stack, urls=[nats_http, redirect, site.url("/items/fine.html")], plugins=["wget"])
        wait_sealed(stack, crawl_id, timeout=120)
        results = results_by_url(stack, crawl_id)
        direct = results[nats_http]
        assert all(r["status"] == "skipped" and "Boxcar's own services" in r["output_str"] for r in direct)
        [via_redirect] = results[redirect]  # the page was fetched; the redirect to NATS was not followed
        assert via_redirect["status"] != "succeeded" and site.hits["/redirect-to"] == 1
        [fine] = results[site.url("/items/fine.html")]
        assert fine["status"] == "succeeded"


#: a spread of "this host" spellings for the end-to-end runs (every spelling is checked against the
#: policy function and both enforcement points in libs/shared/tests/test_egress.py)
E2E_SPELLINGS = ["0", "0.0.0.0", "[::]", "[::ffff:0:0]", "127.1", "[::ffff:127.0.0.1]", "[64:ff9b::127.0.0.1]"]


def test_crawls_and_feeds_of_this_host_in_any_spelling_never_reach_the_stack(sqlite_url, nats_url, make_stack):
    """Listeners stand in for NATS, the API and a browser's DevTools port (the first two named in
    ``EGRESS_SERVICES`` as the stack's own, the third registered at run time as a browser does);
    a crawl and a feed subscription of each spelling, directly and through a redirect, on a LAN
    stack (``URL_ALLOW_PRIVATE=true``), never connect to any of them."""
    listeners = {name: CountingListener() for name in ("nats", "api", "devtools")}
    services = ",".join(f"127.0.0.1:{listeners[n].port}" for n in ("nats", "api"))
    try:
        with FaultSite() as site:
            env = {"EGRESS_SERVICES": services, "MAX_URL_ATTEMPTS": "1"}
            stack = make_stack(sqlite_url, nats_url, families=["fetch"], env=env)
            RuntimePorts(stack.settings.runtime_ports_dir).register("devtools", listeners["devtools"].port)
            targets = [canonicalize(f"http://{h}:{lsn.port}/") for lsn in listeners.values() for h in E2E_SPELLINGS]
            redirects = [site.url("/redirect-to?u=" + quote(t, safe="")) for t in targets]
            client = api(stack)
            crawl_id = submit(stack, urls=targets + redirects, plugins=["wget"])
            feed_ids = [
                client.post("/api/v1/feeds", json={"url": url, "schedule": "daily"}).json()["id"]
                for url in targets + redirects
            ]
            wait_sealed(stack, crawl_id, timeout=180)

            def feeds_failed():
                feeds = [client.get(f"/api/v1/feeds/{i}").json() for i in feed_ids]
                return feeds if all(f["failures"] for f in feeds) else None

            feeds = wait_until(feeds_failed, 120, "every hostile feed's first poll")
            results = results_by_url(stack, crawl_id)
        for url in targets:
            assert all(r["status"] == "skipped" and "Boxcar's own services" in r["output_str"] for r in results[url])
        for url in redirects:
            assert all(r["status"] != "succeeded" for r in results[url]), results[url]
        assert all("refused by the egress policy" in f["last_error"] for f in feeds), [f["last_error"] for f in feeds]
        assert site.hits["/redirect-to"] >= len(redirects)  # the redirecting page itself was fetched
        assert {n: lsn.connections for n, lsn in listeners.items()} == dict.fromkeys(listeners, 0)
    finally:
        for listener in listeners.values():
            listener.close()


def test_a_catastrophic_url_pattern_never_freezes_the_api(sqlite_url, nats_url, make_stack):
    """The probe's per-crawl ``URL_DENYLIST`` of ``/(a+)+b`` and a URL with 30 ``a``s (Python's
    ``re`` backtracks 2^30 times) froze the API for 204 s. Patterns run in RE2 now: ``/healthz``
    answers within a second throughout the crawl, which filters its seeds and every discovered
    link with that pattern, and a backreference RE2 cannot run is a 422 naming the key."""
    with FaultSite() as site:
        stack = make_stack(sqlite_url, nats_url, families=["fetch", "parse"])
        client = api(stack)
        hostile = {"URL_DENYLIST": "/(a+)+b", "MAX_URL_ATTEMPTS": 1}
        urls = [site.url("/items/" + "a" * (30 + i)) for i in range(20)]
        slowest = 0.0

        def healthz() -> float:
            started = time.monotonic()
            assert httpx.get(f"{stack.api_url}/healthz", timeout=5).status_code == 200
            return time.monotonic() - started

        created = client.post(
            "/api/v1/crawls",
            json={"urls": urls, "config": hostile, "plugins": ["wget", "parse_html_urls"], "max_depth": 1},
        )
        assert created.status_code == 201, created.text
        crawl_id = created.json()["id"]
        while client.get(f"/api/v1/crawls/{crawl_id}").json()["status"] != "sealed":
            slowest = max(slowest, healthz())
        assert slowest < 1.0, f"/healthz took {slowest:.2f}s during the crawl"
        refused = client.post("/api/v1/crawls", json={"urls": urls[:1], "config": {"URL_DENYLIST": r"(a)\1"}})
        assert refused.status_code == 422 and "config.URL_DENYLIST" in refused.text, refused.text
