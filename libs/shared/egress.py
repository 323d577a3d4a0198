"""The egress policy: which addresses Boxcar may fetch from — one function for every fetch.

Archived pages, feeds and imports are hostile: ``http://2130706433/`` is 127.0.0.1,
``http://0:4222/`` is this host's NATS, ``http://[64:ff9b::a9fe:a9fe]/`` is the cloud's metadata
service through a NAT64 gateway, and any page may redirect to one of them. So every connection
Boxcar opens for outside content is checked *after* DNS, and made to exactly the address that was
checked (no DNS rebinding between check and connect), for the first request and for every
redirect:

- hooks: through their executor's egress proxy (``boxcar.hook_executor.egress``), which calls
  ``EgressPolicy.check`` for each upstream connection;
- feeds (and any later fetch Boxcar makes itself: favicons, webhooks): through an httpx client
  whose transport calls ``EgressPolicy.check`` for each connection (``policy_client``).

What is refused (``EgressPolicy._refusal``), after unwrapping every IPv6 spelling that carries an
IPv4 address (IPv4-mapped ``::ffff:a.b.c.d``, IPv4-compatible ``::a.b.c.d``, SIIT
``::ffff:0:a.b.c.d``, NAT64 ``64:ff9b::/96``, 6to4 ``2002::/16``, Teredo):

1. cloud metadata endpoints (``METADATA_NETWORKS``: AWS, ECS, EKS, Azure, GCP, Oracle, Alibaba;
   IPv4 and IPv6), always;
2. the stack's own services. On *this host* — loopback, the unspecified address (``0.0.0.0``,
   ``0``, ``[::]``, which Linux connects to this host) and this machine's own interface
   addresses — every port the stack opens: NATS and its monitoring port, Postgres, the API, the
   archive origin (``ARCHIVE_PORT``), the metrics port (``METRICS_PORT``), and the ports processes
   register at run time (a browser's DevTools port, an egress proxy's own port, a metrics port:
   ``RuntimePorts``). A service on another host
   (Compose's ``nats``, ``postgres``) is refused as a whole host;
3. private, loopback, link-local, unspecified and other special-purpose addresses, unless
   ``URL_ALLOW_PRIVATE=true`` (a homelab archiving its LAN).

A host ``URL_ALLOWLIST`` names as a domain is reachable whatever it resolves to: the operator
listed it. A refusal raises ``Refused``, whose message says why in words for the user.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import re
import socket
import time
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

import msgspec

if TYPE_CHECKING:
    from boxcar.shared.settings import Settings

POLICY_ENV = "BOXCAR_EGRESS_POLICY"

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

#: Link-local and private endpoints of cloud metadata services: AWS IMDS, its DNS resolver and
#: time server (169.254.169.0/24), ECS and EKS credential endpoints (169.254.170.0/24), AWS's IPv6
#: IMDS (fd00:ec2::/32), Alibaba (100.100.100.200), Oracle's legacy one (192.0.0.192). GCP and
#: Azure use 169.254.169.254.
METADATA_NETWORKS = tuple(
    ipaddress.ip_network(n)
    for n in ("169.254.169.0/24", "169.254.170.0/24", "100.100.100.200/32", "192.0.0.192/32", "fd00:ec2::/32")
)

#: NAT64 prefixes (RFC 6052 well-known, RFC 8215 local-use): the IPv4 address is the last 32 bits
#: of the well-known /96; the local-use /48 may embed it elsewhere, so it is refused as a whole.
_NAT64_WELL_KNOWN = ipaddress.ip_network("64:ff9b::/96")
_NAT64_LOCAL_USE = ipaddress.ip_network("64:ff9b:1::/48")
_SIIT = ipaddress.ip_network("::ffff:0:0:0/96")
_IPV4_COMPATIBLE = ipaddress.ip_network("::/96")
_THIS_NETWORK = ipaddress.ip_network("0.0.0.0/8")


class Refused(Exception):
    """A fetch the policy refuses; ``str()`` says why, in words for the user."""


def embedded_ipv4(ip: IPAddress) -> list[IPAddress]:
    """The addresses a connection to ``ip`` may really reach: ``ip`` itself, and for an IPv6
    address that carries an IPv4 one (mapped, compatible, SIIT, NAT64, 6to4, Teredo) that IPv4
    address too."""
    out: list[IPAddress] = [ip]
    if not isinstance(ip, ipaddress.IPv6Address):
        return out
    low32 = ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    if ip.ipv4_mapped is not None:
        out.append(ip.ipv4_mapped)
    elif ip in _SIIT or ip in _NAT64_WELL_KNOWN:
        out.append(low32)
    elif ip in _IPV4_COMPATIBLE and int(ip) > 1:  # ::a.b.c.d (deprecated; not :: or ::1)
        out.append(low32)
    if ip.sixtofour is not None:
        out.append(ip.sixtofour)
    if ip.teredo is not None:
        out.extend(ip.teredo)
    return out


@contextlib.contextmanager
def _no_error() -> Iterator[None]:
    with contextlib.suppress(OSError, ValueError):
        yield


def _own_addresses() -> frozenset[IPAddress]:
    """This machine's interface addresses (a service bound to ``0.0.0.0`` answers on each)."""
    found: set[IPAddress] = set()
    with _no_error():
        import psutil

        for addrs in psutil.net_if_addrs().values():
            for addr in addrs:
                if addr.family in (socket.AF_INET, socket.AF_INET6):
                    with _no_error():
                        found.add(ipaddress.ip_address(addr.address.split("%")[0]))
    return frozenset(found)


_OWN: tuple[float, frozenset[IPAddress]] = (0.0, frozenset())


def own_addresses(max_age: float = 30.0) -> frozenset[IPAddress]:
    """``_own_addresses``, read again at most every ``max_age`` seconds (DHCP may change them)."""
    global _OWN
    if time.monotonic() - _OWN[0] > max_age:
        _OWN = (time.monotonic(), _own_addresses())
    return _OWN[1]


def is_this_host(ip: IPAddress) -> bool:
    """True for an address a connection to would reach this machine: loopback, unspecified
    (``0.0.0.0/8``, ``::``) or one of its own interface addresses."""
    if ip.is_loopback or ip.is_unspecified:
        return True
    if isinstance(ip, ipaddress.IPv4Address) and ip in _THIS_NETWORK:
        return True
    return ip in own_addresses()


class RuntimePorts:
    """Ports the stack opens on this host at run time (a browser's DevTools port, an egress
    proxy's own port), registered as files ``<pid>.<name>`` holding the port in one directory
    per machine, so every egress proxy on the machine refuses them. Entries of processes that
    are gone are ignored (and removed by ``register``).

    Args:
        directory: ``DATA_DIR/tmp/<machine>/ports`` (``Settings.runtime_ports_dir``).
    """

    def __init__(self, directory: Path | str) -> None:
        self.directory = Path(directory)
        self._cache: tuple[int, tuple[tuple[str, int], ...]] = (-1, ())

    def register(self, name: str, port: int, pid: int | None = None) -> Path:
        """Record that ``pid`` (default this process) listens on ``port``; returns the entry's
        path (``unregister`` removes it)."""
        self.directory.mkdir(parents=True, exist_ok=True)
        pid = os.getpid() if pid is None else pid
        path = self.directory / f"{pid}.{name}"
        tmp = path.with_suffix(path.suffix + ".tmp")
        tmp.write_text(str(int(port)))
        os.replace(tmp, path)
        for entry in self.directory.iterdir():  # tidy up after processes that died
            if not _pid_alive(entry.name.partition(".")[0]):
                entry.unlink(missing_ok=True)
        return path

    @staticmethod
    def unregister(path: Path) -> None:
        path.unlink(missing_ok=True)

    def ports(self) -> frozenset[int]:
        """Every registered port of a live process (the directory is listed again only when it
        changed; whether each owner lives is asked every time)."""
        try:
            stamp = self.directory.stat().st_mtime_ns
        except OSError:
            return frozenset()
        if stamp != self._cache[0]:
            entries = []
            for entry in self.directory.iterdir():
                pid, _, name = entry.name.partition(".")
                if name.endswith(".tmp"):
                    continue
                with _no_error():
                    entries.append((pid, int(entry.read_text().strip())))
            self._cache = (stamp, tuple(entries))
        return frozenset(port for pid, port in self._cache[1] if _pid_alive(pid))


def _pid_alive(pid: str) -> bool:
    if not pid.isdigit():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class EgressPolicy(msgspec.Struct, frozen=True):
    """What Boxcar may reach (see the module docstring).

    Attributes:
        allow_private: ``URL_ALLOW_PRIVATE``.
        services: the stack's own ``[host, port]`` endpoints (port 0: the whole host).
        allowed_hosts: host names ``URL_ALLOWLIST`` names explicitly (always reachable).
        runtime_ports_dir: the ``RuntimePorts`` directory ("" = none).
    """

    allow_private: bool = False
    services: list[tuple[str, int]] = []
    allowed_hosts: list[str] = []
    runtime_ports_dir: str = ""

    @classmethod
    def from_settings(cls, settings: Settings, environ: Mapping[str, str] | None = None) -> EgressPolicy:
        """The policy for this deployment: ``URL_ALLOW_PRIVATE``, the service URLs in the settings
        (each server of ``NATS_URL`` and its monitoring port, each host of ``DATABASE_URL``, the
        API, ``ARCHIVE_PORT``, ``METRICS_PORT``, the S3 endpoint of ``STORE_URL`` unless public),
        ``EGRESS_SERVICES`` (extra ``host:port``, comma-separated) and ``URL_ALLOWLIST``'s domains."""
        environ = os.environ if environ is None else environ
        services: list[tuple[str, int]] = []
        from boxcar.shared.settings import libpq_hosts  # at run time only: settings is heavier

        hosts = [f"postgresql://{host}" for host in libpq_hosts(settings.database_url)]
        urls = [*settings.nats_servers, *(hosts or [settings.database_url])]
        urls.append(f"http://{settings.api_host}:{settings.api_port}")
        if settings.archive_port:
            urls.append(f"http://{settings.api_host}:{settings.archive_port}")
        if settings.archive_origin:
            urls.append(settings.archive_origin)
        if settings.metrics_port:
            urls.append(f"http://{settings.metrics_host}:{settings.metrics_port}")
        from boxcar.shared.archive_store import store_endpoint

        endpoint = store_endpoint(settings.store_url, environ)
        host = urlsplit(endpoint).hostname or ""
        # an S3 server of the stack's own (on the LAN, or a name not resolvable yet); a public
        # endpoint (R2, B2, ... behind shared addresses) is not: refusing it would refuse its neighbours
        if host and not any(_is_public(ip) for ip in resolve(host)):
            urls.append(endpoint)
        for url in urls:
            parts = urlsplit(url or "")
            try:
                port = parts.port or {"http": 80, "https": 443}.get(parts.scheme, 0)
            except ValueError:
                port = 0
            if parts.hostname:
                services.append((parts.hostname, port))
                if parts.scheme == "nats" and port:
                    services.append((parts.hostname, 8222))  # NATS' HTTP monitoring port
        for item in environ.get("EGRESS_SERVICES", "").split(","):
            host, _, digits = item.strip().rpartition(":")
            if host and digits.isdigit():
                services.append((host.strip("[]"), int(digits)))
        domains = [p.strip().lower().lstrip("*.") for p in settings.url_allowlist.split(",") if p.strip()]
        allowed = [d for d in domains if d and all(ch.isalnum() or ch in ".-" for ch in d)]
        return cls(
            allow_private=settings.url_allow_private,
            services=services,
            allowed_hosts=allowed,
            runtime_ports_dir=str(settings.runtime_ports_dir),
        )

    def to_env(self) -> str:
        return msgspec.json.encode(self).decode()

    @classmethod
    def from_env(cls) -> EgressPolicy:
        return msgspec.json.decode(os.environ.get(POLICY_ENV, "{}"), type=cls)

    def check(self, host: str, port: int) -> str:
        """The address to connect to for ``host:port``, resolved once (blocking DNS: call it from a
        thread in async code).

        Raises:
            Refused: the policy forbids every address the host resolves to (the reason names it).
        """
        addresses = resolve(host)
        if not addresses:
            raise Refused(f"{host} does not resolve to any address")
        if host.lower().rstrip(".").strip("[]") in self.allowed_hosts:
            return str(addresses[0])
        this_host_ports, remote = self._service_endpoints()
        reason = ""
        for ip in addresses:
            reason = self._refusal(ip, port, this_host_ports, remote)
            if not reason:
                return str(ip)
        raise Refused(f"{host}:{port} is refused: {reason}")

    def _service_endpoints(self) -> tuple[set[int], set[IPAddress]]:
        """``(ports the stack opens on this host, addresses of its services on other hosts)``."""
        ports: set[int] = set()
        remote: set[IPAddress] = set()
        for host, port in self.services:
            for ip in resolve(host):
                if any(is_this_host(a) for a in embedded_ipv4(ip)):
                    if port:
                        ports.add(port)
                else:
                    remote.add(ip)
        if self.runtime_ports_dir:
            ports |= _runtime(self.runtime_ports_dir).ports()
        return ports, remote

    def _refusal(self, ip: IPAddress, port: int, this_host_ports: set[int], remote: set[IPAddress]) -> str:
        for reached in embedded_ipv4(ip):
            if any(reached in network for network in METADATA_NETWORKS):
                return f"a cloud metadata address ({reached})"
            if is_this_host(reached) and port in this_host_ports:
                return f"one of Boxcar's own services (port {port} of this host)"
            if reached in remote:
                return f"one of Boxcar's own services ({reached})"
            if reached in _NAT64_LOCAL_USE:
                return f"a local-use NAT64 address ({reached})"
        if not self.allow_private and not all(_is_public(a) for a in embedded_ipv4(ip)):
            return f"a private or special-purpose address ({ip}); set URL_ALLOW_PRIVATE=true to archive your LAN"
        return ""


def _is_public(ip: IPAddress) -> bool:
    return ip.is_global and not ip.is_multicast


_RUNTIME: dict[str, RuntimePorts] = {}


def _runtime(directory: str) -> RuntimePorts:
    if directory not in _RUNTIME:
        _RUNTIME[directory] = RuntimePorts(directory)
    return _RUNTIME[directory]


def resolve(host: str) -> list[IPAddress]:
    """Every address ``host`` resolves to (an IP literal is itself; ``0``, ``127.1`` and other
    shorthand go through the system resolver like a connection would); [] when none."""
    host = host.strip("[]")
    try:
        return [ipaddress.ip_address(host.split("%")[0])]
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError, OSError):
        return []
    return list(dict.fromkeys(ipaddress.ip_address(str(info[4][0]).split("%")[0]) for info in infos))


def url_refusal(policy: EgressPolicy, url: str) -> str:
    """Why ``url`` may not be fetched, or "" (blocking DNS)."""
    try:
        parts = urlsplit(url)
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        return "invalid port"
    try:
        policy.check(parts.hostname or "", port)
    except Refused as exc:
        return str(exc)
    return ""


_DETAIL = re.compile(r"\s*\([^()]*\)")


def refusal_kind(reason: str) -> str:
    """A refusal without the page's host and addresses — "a private or special-purpose address;
    set URL_ALLOW_PRIVATE=true to archive your LAN" — to say once for every page it applies to."""
    return _DETAIL.sub("", reason.split(" is refused: ", 1)[-1]).strip()


def refused_ports(policy: EgressPolicy) -> Iterable[int]:
    """The ports on this host the policy refuses (for messages and tests)."""
    return sorted(policy._service_endpoints()[0])
