"""Hostile URLs: the stack's own services, private and special addresses are never fetched —
directly, through a decimal-IP disguise, or by a redirect — unless the operator allows it
(``URL_ALLOW_PRIVATE`` for a LAN); the refusal is recorded with its reason."""

from __future__ import annotations

from urllib.parse import quote, urlsplit

from tests.fault_site import FaultSite
from tests.helpers import api, submit, wait_sealed


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
