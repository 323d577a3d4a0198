"""The installable app (PWA): a web app manifest with a Web Share Target, the app-shell service
worker and the favicon.

A phone's "Share" sheet then lists Boxcar: sharing a page opens ``/add`` with the shared ``url``,
``title`` and ``text`` (``share_target`` of the W3C Web Share Target draft, GET), and ``/add``
finds the URL inside shared text when an app sends it there. The service worker (``static/sw.js``)
caches the app shell only and never answers for archived content, replay or the API.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from litestar import Controller, Response, get

from boxcar.ingest import routes

STATIC = Path(__file__).resolve().parent / "static"
ICONS = f"{routes.STATIC}/icons"


def manifest() -> dict[str, Any]:
    """The web app manifest (W3C Web Application Manifest), with ``share_target`` → ``/add``."""
    return {
        "id": "/",
        "name": "Boxcar web archive",
        "short_name": "Boxcar",
        "description": "Save web pages to your own archive.",
        "start_url": "/",
        "scope": "/",
        "display": "standalone",
        "background_color": "#f8f9fb",
        "theme_color": "#2f5bd3",
        "icons": [
            {"src": f"{ICONS}/icon-192.png", "sizes": "192x192", "type": "image/png"},
            {"src": f"{ICONS}/icon-512.png", "sizes": "512x512", "type": "image/png"},
            {"src": f"{ICONS}/maskable-512.png", "sizes": "512x512", "type": "image/png", "purpose": "maskable"},
            {"src": f"{ICONS}/icon.svg", "sizes": "any", "type": "image/svg+xml"},
        ],
        "share_target": {
            "action": routes.ADD,
            "method": "GET",
            "enctype": "application/x-www-form-urlencoded",
            "params": {"title": "title", "text": "text", "url": "url"},
        },
        "shortcuts": [{"name": "Add to the archive", "url": routes.ADD}],
    }


class AppShell(Controller):
    """``/manifest.webmanifest``, ``/sw.js`` and ``/favicon.ico``: public (no archive data)."""

    include_in_schema = False

    @get(routes.MANIFEST, sync_to_thread=False)
    def web_manifest(self) -> Response[dict[str, Any]]:
        return Response(manifest(), media_type="application/manifest+json")

    @get(routes.SERVICE_WORKER, sync_to_thread=False)
    def service_worker(self) -> Response[bytes]:
        # served from the root so that its scope is the UI; never cached long (a new release's
        # worker must replace the old one at the next visit)
        return Response(
            (STATIC / "sw.js").read_bytes(),
            media_type="text/javascript",
            headers={"Cache-Control": "no-cache"},
        )

    @get(routes.FAVICON, sync_to_thread=False)
    def favicon(self) -> Response[bytes]:
        return Response((STATIC / "icons" / "icon-32.png").read_bytes(), media_type="image/png")
