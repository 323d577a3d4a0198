"""URL policy, in one place: what Boxcar archives and the canonical form it stores.

- Only ``http`` and ``https`` URLs are archived; anything else is rejected with a reason.
- Scheme and host are lower-cased, IDN hosts IDNA-encoded (UTS #46), default ports dropped,
  userinfo removed from the stored URL (``credentials`` keeps it apart, to be encrypted), an
  empty path becomes ``/``.
- Non-ASCII characters and spaces in path, query and fragment are percent-encoded (UTF-8);
  existing escapes are kept as they are, so the URL that is fetched is the one the user gave.
  Fragments are kept (``#a`` and ``#b`` are different pages to a single-page app).
- ``url_key`` is the dedup key: the canonical URL further normalized by RFC 3986 §6.2.2.1–2
  (hex digits of percent-escapes upper-cased, escapes of unreserved characters decoded), so
  ``/p%C3%BCr`` and ``/p%c3%bcr`` are one page while neither is rewritten for fetching.
- URLs up to ``MAX_URL_LENGTH`` characters are accepted (well above the 8 KB some archives need).

``canonicalize`` and ``url_key`` are idempotent: ``f(f(u)) == f(u)``.
"""

from __future__ import annotations

import ipaddress
import json
import re
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import SplitResult, quote, urlsplit, urlunsplit

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
    """Return the canonical form of an http(s) URL (see ``canonical_parts``)."""
    return canonical_parts(url)[0]


def canonical_parts(url: str) -> tuple[str, str]:
    """Split an http(s) URL into its canonical form and its userinfo.

    Args:
        url: an absolute URL as a user or a parser gave it (surrounding whitespace is ignored).

    Returns:
        ``(canonical URL, userinfo)``: the URL without credentials (see module docstring) and the
        ``user[:password]`` part as written (percent-escapes kept), or ``""`` when there is none.

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
    userinfo = parts.netloc.rpartition("@")[0] if "@" in parts.netloc else ""
    return urlunsplit((scheme, netloc, path, query, fragment)), userinfo


_ESCAPE = re.compile(r"%([0-9A-Fa-f]{2})")
_UNRESERVED = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")


def _normalize_escape(match: re.Match[str]) -> str:
    char = chr(int(match[1], 16))
    return char if char in _UNRESERVED else "%" + match[1].upper()


def url_key(canonical_url: str) -> str:
    """The dedup key of a canonical URL: RFC 3986 §6.2.2 percent-encoding normalization.

    Hex digits of escapes are upper-cased and escapes of unreserved characters
    (``ALPHA / DIGIT / "-" / "." / "_" / "~"``) decoded; nothing else changes. Two URLs with the
    same key are the same resource to every RFC 3986 server, so Boxcar archives them once.
    """
    return _ESCAPE.sub(_normalize_escape, canonical_url)


_USERINFO = re.compile(r"(?i)\b(https?://)[^/?#@\s\"'<>]*@")


def strip_userinfo(text: str) -> str:
    """``text`` with the userinfo of every http(s) URL in it removed (``http://u:p@h/`` →
    ``http://h/``): for URLs the hooks report back, and for imported files kept in ``sources/``."""
    return _USERINFO.sub(r"\1", text) if "@" in text else text


def with_userinfo(canonical_url: str, userinfo: str) -> str:
    """``canonical_url`` with ``userinfo`` (as ``canonical_parts`` returned it) put back: the URL
    to fetch a password-protected page with. Never store or log the result."""
    if not userinfo:
        return canonical_url
    scheme, rest = canonical_url.split("://", 1)
    return f"{scheme}://{userinfo}@{rest}"


def _canonical_host(url: str, parts: SplitResult) -> str:
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
            ascii_host = str(idna.encode(hostname, uts46=True), "ascii")
        except idna.IDNAError as exc:
            raise InvalidURL(url, f"invalid international domain name ({exc})") from None
    if not ascii_host or not _HOST_OK.match(ascii_host) or ".." in ascii_host:
        raise InvalidURL(url, "invalid host name")
    return ascii_host


_DOMAIN = re.compile(r"^(\*\.)?[a-z0-9-]+(\.[a-z0-9-]+)+$", re.IGNORECASE)

#: Limits on a URL filter setting: patterns in one setting, characters in one pattern, and the
#: memory RE2 may use to compile one (a pattern needing more is refused, not run slowly).
MAX_PATTERNS = 200
MAX_PATTERN_LENGTH = 2048
MAX_PATTERN_MEMORY = 4 * 1024 * 1024


def _patterns(setting: str, value: str) -> list[str]:
    """A filter setting as patterns: a JSON list, a comma-separated list of domains, or one regex.

    Raises:
        ValueError: more than ``MAX_PATTERNS`` patterns, or one longer than ``MAX_PATTERN_LENGTH``.
    """
    value = (value or "").strip()
    if not value:
        return []
    patterns = [value]
    if value.startswith("["):
        try:
            patterns = [str(p) for p in json.loads(value) if str(p).strip()]
        except (ValueError, TypeError):
            pass
    else:
        parts = [p.strip() for p in value.split(",")]
        if all(_DOMAIN.match(p) for p in parts):
            patterns = parts
    if len(patterns) > MAX_PATTERNS:
        raise ValueError(f"{setting}: more than {MAX_PATTERNS} patterns")
    if any(len(p) > MAX_PATTERN_LENGTH for p in patterns):
        raise ValueError(f"{setting}: a pattern longer than {MAX_PATTERN_LENGTH} characters")
    return patterns


def _re2_options() -> Any:
    import re2

    options = re2.Options()
    options.case_sensitive = False
    options.max_mem = MAX_PATTERN_MEMORY
    options.log_errors = False
    return options


#: ``(host, url) -> matches``: one compiled URL_ALLOWLIST/URL_DENYLIST pattern
Matcher = Callable[[str, str], bool]


class UrlFilter:
    """``URL_ALLOWLIST`` / ``URL_DENYLIST`` (ArchiveBox's names): each a regex searched in the URL,
    a domain (``example.com`` also matches its subdomains; ``*.example.com`` only them), a
    comma-separated list of domains, or a JSON list of either. The denylist wins.

    Patterns are user input (a crawl's config, a feed subscription) run against every seed,
    discovered link and feed item, so they run in RE2 (``google-re2``): matching takes time linear
    in the URL's length whatever the pattern (``(a+)+b`` cannot backtrack), and a pattern is
    compiled within ``MAX_PATTERN_MEMORY``. RE2 has no backreferences or look-around; ArchiveBox's
    default lists need neither. Matching is case-insensitive, as ArchiveBox's is.

    Raises:
        ValueError: a pattern is not a valid RE2 regex, too large, or too many (the message names
            the setting).
    """

    def __init__(self, allowlist: str = "", denylist: str = "") -> None:
        self.allow = [self._compile("URL_ALLOWLIST", p) for p in _patterns("URL_ALLOWLIST", allowlist)]
        self.deny = [self._compile("URL_DENYLIST", p) for p in _patterns("URL_DENYLIST", denylist)]

    @classmethod
    def from_config(cls, config: Mapping[str, str], allowlist: str, denylist: str) -> UrlFilter:
        """A filter from a crawl's config overrides, falling back to the settings' lists."""
        return cls(config.get("URL_ALLOWLIST", allowlist), config.get("URL_DENYLIST", denylist))

    @staticmethod
    def _compile(setting: str, pattern: str) -> Matcher:
        if _DOMAIN.match(pattern):
            domain = pattern.lower()
            if domain.startswith("*."):
                suffix = domain[1:]
                return lambda host, url: host.endswith(suffix)
            return lambda host, url: host == domain or host.endswith("." + domain)
        import re2

        try:
            regex = re2.compile(pattern, _re2_options())
        except re2.error as exc:
            message = exc.args[0].decode(errors="replace") if exc.args and isinstance(exc.args[0], bytes) else exc
            raise ValueError(f"{setting}: invalid regex for RE2, or too large: {pattern[:200]!r} ({message})") from None
        return lambda host, url: regex.search(url) is not None

    def reason(self, url: str) -> str | None:
        """None when ``url`` (canonical) may be archived, else why not."""
        host = (urlsplit(url).hostname or "").lower()
        if any(match(host, url) for match in self.deny):
            return "blocked by URL_DENYLIST"
        if self.allow and not any(match(host, url) for match in self.allow):
            return "not in URL_ALLOWLIST"
        return None


def origin(url: str) -> str:
    """The origin of an http(s) URL as text, ``scheme://host[:port]`` (RFC 6454 §6.2
    serialization): scheme and host lower case, the scheme's default port dropped, IPv6 hosts in
    brackets; ``""`` for a URL without a scheme or a host, or with a malformed port. For the URLs
    Boxcar handles (``canonicalize``d ones, the ``Origin`` and ``Host`` a browser sends) it is what
    the browser sends in ``Origin``; it does not IDNA-encode or resolve odd IPv4 forms (``0x7f.1``),
    and ``""`` is nobody's origin (callers check for it before comparing).
    """
    try:
        parts = urlsplit(url.strip())
        host, port = (parts.hostname or ""), parts.port
    except ValueError:
        return ""
    scheme = parts.scheme.lower()
    if not scheme or not host:
        return ""
    host = f"[{host}]" if ":" in host else host
    return f"{scheme}://{host}" + (f":{port}" if port is not None and port != _DEFAULT_PORTS.get(scheme) else "")


def url_domain(url: str) -> str:
    """A URL's host name in lower case (no port), "" when it has none: ``Snapshot.domain``."""
    try:
        return (urlsplit(url).hostname or "")[:255]
    except ValueError:
        return ""
