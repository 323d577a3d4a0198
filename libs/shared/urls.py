"""URL policy, in one place: what Boxcar archives and the canonical form it stores.

- Only ``http`` and ``https`` URLs are archived; anything else is rejected with a reason.
- Scheme and host are lower-cased, IDN hosts IDNA-encoded (UTS #46), default ports dropped,
  userinfo removed from the stored URL, an empty path becomes ``/``.
- Non-ASCII characters and spaces in path, query and fragment are percent-encoded (UTF-8);
  existing escapes are kept as they are. Fragments are kept (``#a`` and ``#b`` are different
  pages to a single-page app).
- URLs up to ``MAX_URL_LENGTH`` characters are accepted (well above the 8 KB some archives need).

``canonicalize`` is idempotent: ``canonicalize(canonicalize(u)) == canonicalize(u)``.
"""

from __future__ import annotations

import ipaddress
import json
import re
from collections.abc import Mapping
from urllib.parse import quote, urlsplit, urlunsplit

import idna

MAX_URL_LENGTH = 32 * 1024
ALLOWED_SCHEMES = ("http", "https")
_DEFAULT_PORTS = {"http": 80, "https": 443}
# Characters left as they are when percent-encoding: RFC 3986 reserved + unreserved + "%".
_SAFE_PATH = "/:@!$&'()*+,;=-._~%"
_SAFE_QUERY = _SAFE_PATH + "?"
_HOST_OK = re.compile(r"^[a-z0-9._-]+$")


class InvalidURL(ValueError):
    """A URL Boxcar will not archive. ``reason`` says why in words a user understands."""

    def __init__(self, url: str, reason: str) -> None:
        super().__init__(f"{reason}: {url[:200]!r}")
        self.url = url
        self.reason = reason


def canonicalize(url: str) -> str:
    """Return the canonical form of an http(s) URL.

    Args:
        url: an absolute URL as a user or a parser gave it (surrounding whitespace is ignored).

    Returns:
        The canonical URL string (see module docstring).

    Raises:
        InvalidURL: not http(s), no host, a malformed host or port, or longer than
            ``MAX_URL_LENGTH``.
    """
    if not isinstance(url, str):
        raise InvalidURL(repr(url), "URL must be a string")
    raw = url.strip()
    if not raw:
        raise InvalidURL(url, "empty URL")
    if len(raw) > MAX_URL_LENGTH:
        raise InvalidURL(url, f"URL longer than {MAX_URL_LENGTH} characters")
    if any(ch in raw for ch in "\r\n\t\x00"):
        raise InvalidURL(url, "URL contains control characters")
    try:
        parts = urlsplit(raw)
    except ValueError as exc:
        raise InvalidURL(url, f"malformed URL ({exc})") from None
    scheme = parts.scheme.lower()
    if scheme not in ALLOWED_SCHEMES:
        if not scheme:
            raise InvalidURL(url, "not an absolute URL (no http:// or https://)")
        raise InvalidURL(url, f"unsupported scheme {scheme!r} (only http and https are archived)")
    host = _canonical_host(url, parts)
    try:
        port = parts.port
    except ValueError:
        raise InvalidURL(url, "invalid port") from None
    netloc = host
    if port is not None and port != _DEFAULT_PORTS[scheme]:
        netloc = f"{host}:{port}"
    path = quote(parts.path, safe=_SAFE_PATH) or "/"
    query = quote(parts.query, safe=_SAFE_QUERY)
    fragment = quote(parts.fragment, safe=_SAFE_QUERY)
    result = urlunsplit((scheme, netloc, path, query, fragment))
    # urlunsplit drops an empty "?" or "#"; keep them only when the input had content there.
    return result


def _canonical_host(url: str, parts) -> str:
    hostname = parts.hostname
    if not hostname:
        raise InvalidURL(url, "URL has no host")
    if hostname.startswith("[") or ":" in hostname:
        try:
            return f"[{ipaddress.IPv6Address(hostname.strip('[]')).compressed}]"
        except ValueError:
            raise InvalidURL(url, "invalid IPv6 host") from None
    hostname = hostname.rstrip(".") if hostname != "." else hostname
    try:
        ascii_host = hostname.encode("ascii").decode("ascii").lower()
    except UnicodeEncodeError:
        try:
            ascii_host = idna.encode(hostname, uts46=True).decode("ascii")
        except idna.IDNAError as exc:
            raise InvalidURL(url, f"invalid international domain name ({exc})") from None
    if not ascii_host or not _HOST_OK.match(ascii_host) or ".." in ascii_host:
        raise InvalidURL(url, "invalid host name")
    return ascii_host


_DOMAIN = re.compile(r"^(\*\.)?[a-z0-9-]+(\.[a-z0-9-]+)+$", re.IGNORECASE)


def _patterns(value: str) -> list[str]:
    """A filter setting as patterns: a JSON list, a comma-separated list of domains, or one regex."""
    value = (value or "").strip()
    if not value:
        return []
    if value.startswith("["):
        try:
            return [str(p) for p in json.loads(value) if str(p).strip()]
        except ValueError:
            pass
    parts = [p.strip() for p in value.split(",")]
    if all(_DOMAIN.match(p) for p in parts):
        return parts
    return [value]


class UrlFilter:
    """``URL_ALLOWLIST`` / ``URL_DENYLIST`` (ArchiveBox's names): each a regex searched in the URL,
    a domain (``example.com`` also matches its subdomains; ``*.example.com`` only them), a
    comma-separated list of domains, or a JSON list of either. The denylist wins.

    Raises:
        ValueError: a pattern is not a valid regex (message names the setting).
    """

    def __init__(self, allowlist: str = "", denylist: str = "") -> None:
        self.allow = [self._compile("URL_ALLOWLIST", p) for p in _patterns(allowlist)]
        self.deny = [self._compile("URL_DENYLIST", p) for p in _patterns(denylist)]

    @classmethod
    def from_config(cls, config: Mapping[str, str], allowlist: str, denylist: str) -> UrlFilter:
        """A filter from a crawl's config overrides, falling back to the settings' lists."""
        return cls(config.get("URL_ALLOWLIST", allowlist), config.get("URL_DENYLIST", denylist))

    @staticmethod
    def _compile(setting: str, pattern: str):
        if _DOMAIN.match(pattern):
            domain = pattern.lower()
            if domain.startswith("*."):
                return lambda host, url, d=domain[1:]: host.endswith(d)
            return lambda host, url, d=domain: host == d or host.endswith("." + d)
        try:
            regex = re.compile(pattern, re.IGNORECASE)
        except re.error as exc:
            raise ValueError(f"{setting}: invalid regex {pattern!r} ({exc})") from None
        return lambda host, url, r=regex: r.search(url) is not None

    def reason(self, url: str) -> str | None:
        """None when ``url`` (canonical) may be archived, else why not."""
        host = (urlsplit(url).hostname or "").lower()
        if any(match(host, url) for match in self.deny):
            return "blocked by URL_DENYLIST"
        if self.allow and not any(match(host, url) for match in self.allow):
            return "not in URL_ALLOWLIST"
        return None
