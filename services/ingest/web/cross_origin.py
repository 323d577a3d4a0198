"""Cross-origin protection for the web UI: a browser's request that changes something (any method
but GET, HEAD, OPTIONS) must come from a page of Boxcar's own origin.

The CSRF token alone is not enough here. Litestar's token is a double-submit cookie: any token it
ever signed is valid for anyone, so a page that can write a ``csrftoken`` cookie Boxcar's origin
receives can forge a form post with a token of its own. Cookies are shared by every port of a host,
so with ``ARCHIVE_SECURITY_MODE=separate-origin`` an archived page's script on the archive origin
(same host, ``ARCHIVE_PORT``) can write that cookie, and its form posts to Boxcar are same-site:
they carry the session cookie despite ``SameSite=Lax``. This check refuses them, whatever the
cookies say.

The rule is the Fetch Metadata one, as Go's ``net/http.CrossOriginProtection`` (Go 1.25) applies it:

- ``Sec-Fetch-Site: same-origin`` or ``none`` (typed in, a bookmark): allowed; any other value
  (``same-site``, ``cross-site``): refused;
- without ``Sec-Fetch-Site``, an ``Origin`` header must name the host the request was sent to
  (``Host``) or be ``PUBLIC_URL``'s origin (for a proxy that rewrites ``Host``). Browsers send
  ``Sec-Fetch-Site`` only to HTTPS and localhost origins (and not before 2020–2023), so a plain-HTTP
  LAN deployment gets this check;
- a request with neither header is not from a browser's page (curl, the CLI, the tests) and is
  allowed (the CSRF token still applies).

A refusal is a 403 answered here (JSON ``{"status_code", "detail"}``, as Litestar's own), so the
HTTP metrics count it as one.

Paths that take an API token and never the session cookie (``routes.CSRF_EXEMPT``) are not checked:
the browser extension calls them from its own origin.
"""

from __future__ import annotations

import re
from urllib.parse import urlsplit

import msgspec
from litestar.datastructures import Headers
from litestar.enums import MediaType, ScopeType
from litestar.middleware import ASGIMiddleware
from litestar.response.base import ASGIResponse
from litestar.types import ASGIApp, Receive, Scope, Send

from boxcar.ingest import routes
from boxcar.shared.urls import origin as origin_of

SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
#: ``Sec-Fetch-Site`` values of a request a page of the same origin (or the user) started
SAME_ORIGIN = frozenset({"same-origin", "none"})
_EXEMPT = re.compile("|".join(routes.CSRF_EXEMPT))
_NOT_HOST = re.compile(r"[@/?#\\\s]")


def cross_origin_refusal(headers: Headers, trusted: frozenset[str] = frozenset()) -> str:
    """Why a state-changing request (any method but ``SAFE_METHODS``: the caller lets those
    through) must be refused as cross-origin, or ``""`` when it may go on.

    Args:
        headers: the request's headers (``Sec-Fetch-Site``, ``Origin``, ``Host``).
        trusted: origins (``urls.origin``) accepted in ``Origin`` whatever ``Host`` says.
    """
    site = headers.get("sec-fetch-site", "").strip().lower()
    if site:
        return "" if site in SAME_ORIGIN else f"a {site} request may not change anything here"
    origin = headers.get("origin", "").strip()
    if not origin:
        return ""
    sent_from = origin_of(origin)
    # Host read as an origin of the same scheme: what Go compares (Origin's host to Host), with
    # the scheme's default port written or not alike; a Host that is more than host[:port]
    # (userinfo, a path) is nobody's
    host = headers.get("host", "")
    here = "" if _NOT_HOST.search(host) else origin_of(f"{urlsplit(sent_from).scheme}://{host}")
    if sent_from and sent_from in (here, *trusted):
        return ""
    return f"a request from {origin[:100]} may not change anything here"


class CrossOriginProtection(ASGIMiddleware):
    """Answers 403 to a state-changing request that a browser sent from another origin
    (``cross_origin_refusal``), before the CSRF check and the handler.

    Args:
        public_url: ``PUBLIC_URL``; its origin is trusted in ``Origin`` (empty: none).
    """

    scopes = (ScopeType.HTTP,)
    should_bypass_for_scope = staticmethod(lambda scope: _EXEMPT.match(scope["path"]) is not None)

    def __init__(self, public_url: str = "") -> None:
        self.trusted = frozenset(filter(None, [origin_of(public_url)]))

    async def handle(self, scope: Scope, receive: Receive, send: Send, next_app: ASGIApp) -> None:
        if scope["method"] in SAFE_METHODS:
            await next_app(scope, receive, send)
            return
        reason = cross_origin_refusal(Headers.from_scope(scope), self.trusted)
        if not reason:
            await next_app(scope, receive, send)
            return
        body = {"status_code": 403, "detail": f"Cross-origin request refused: {reason}"}
        refusal = ASGIResponse(body=msgspec.json.encode(body), status_code=403, media_type=MediaType.JSON)
        await refusal(scope, receive, send)
