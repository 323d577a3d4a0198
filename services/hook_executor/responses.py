"""What a task's hooks saw of the page's HTTP response: final status, final URL, network error.

Hooks report results, not the response, so the executor reads it where they leave it:

- the browser's ``chrome_navigate`` hook writes ``chrome/navigation.json`` (``status``,
  ``finalUrl``, ``content_type``, or ``error`` such as ``net::ERR_CONNECTION_REFUSED``) and the
  ``headers`` plugin ``headers/headers.json`` (``status``, ``final_url``, ``response_headers``
  with ``Retry-After``) — preferred when present;
- wget logs every request it makes (``--verbose``); the page's own chain comes first: each
  ``--<time>--  URL`` line, then ``HTTP request sent, awaiting response... 302 Found`` and
  ``Location: … [following]`` until a non-redirect status;
- a fetch that got no response at all (``Connection refused``, a DNS failure, ``net::ERR_…``)
  is a network error, retried like a 5xx (``MAX_URL_ATTEMPTS``).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import msgspec

_WGET_URL = re.compile(r"^--\d{4}-\d\d-\d\d \d\d:\d\d:\d\d--\s+(\S+)", re.M)
_WGET_STATUS = re.compile(r"(?:HTTP request sent|Proxy request sent), awaiting response\.\.\. (\d{3})")
_WGET_NETWORK = re.compile(
    r"(failed: (?:Connection refused|Connection timed out|No route to host|Network is unreachable|"
    r"Name or service not known|Temporary failure in name resolution)\.?"
    r"|unable to resolve host address [^\n]+|Read error \([^)]*\)[^\n]*|No data received\.)"
)
_CHROME_NETWORK = re.compile(r"net::ERR_[A-Z_]+")
_NOT_NETWORK = ("net::ERR_ABORTED", "net::ERR_BLOCKED_BY_CLIENT", "net::ERR_HTTP_RESPONSE_CODE_FAILURE")


class PageResponse(msgspec.Struct):
    """The page's response as the hooks saw it; None/"" where they could not tell.

    ``retry_after`` is the server's ``Retry-After`` in seconds (a 429 or 503 asking for patience).
    """

    http_status: int | None = None
    final_url: str = ""
    network_error: str = ""
    content_type: str = ""
    retry_after: float | None = None


def json_file(path: Path) -> dict:
    """The JSON object in ``path``, or ``{}`` (missing, unreadable, not an object)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def from_browser(snap_dir: Path) -> PageResponse | None:
    """What the browser saw: ``chrome/navigation.json``, completed by ``headers/headers.json``."""
    navigation = json_file(snap_dir / "chrome" / "navigation.json")
    headers = json_file(snap_dir / "headers" / "headers.json")
    status = navigation.get("status")
    if not isinstance(status, int):
        status = headers.get("status")
    if not isinstance(status, int) or not 100 <= status <= 599:
        error = network_error_in(str(navigation.get("error") or ""))
        return PageResponse(network_error=error) if error else None
    final = navigation.get("finalUrl") or headers.get("final_url") or headers.get("response_url") or ""
    response_headers = {str(k).lower(): v for k, v in (headers.get("response_headers") or {}).items()}
    return PageResponse(
        http_status=status,
        final_url=final if isinstance(final, str) else "",
        content_type=str(navigation.get("content_type") or response_headers.get("content-type") or ""),
        retry_after=_retry_after(response_headers.get("retry-after")),
    )


def _retry_after(value) -> float | None:
    """``Retry-After`` in seconds (a number of seconds; an HTTP date is not worth the parse here)."""
    try:
        seconds = float(str(value).strip())
    except (TypeError, ValueError):
        return None
    return seconds if 0 <= seconds <= 24 * 3600 else None


def from_wget_log(log: str) -> PageResponse | None:
    """The requested page's response from wget's verbose log (its start), following redirects."""
    starts = list(_WGET_URL.finditer(log))
    if not starts:
        return None
    final_url = starts[0][1]
    for i, start in enumerate(starts):
        end = starts[i + 1].start() if i + 1 < len(starts) else len(log)
        block = log[start.end() : end]
        status = _WGET_STATUS.search(block)
        if status is None:
            network = _WGET_NETWORK.search(block)
            return PageResponse(final_url=final_url, network_error=f"wget: {network[0]}" if network else "")
        code = int(status[1])
        final_url = start[1]
        if 300 <= code < 400 and "[following]" in block:
            continue
        return PageResponse(http_status=code, final_url=final_url)
    return None


def network_error_in(text: str) -> str:
    """A browser's network error (``net::ERR_CONNECTION_REFUSED`` …) named in ``text``, or ""."""
    for match in _CHROME_NETWORK.finditer(text or ""):
        if match[0] not in _NOT_NETWORK:
            return match[0]
    return ""
