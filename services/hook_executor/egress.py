"""Egress policy: which addresses hooks may fetch from, enforced after DNS and on every redirect.

Archived pages are hostile, and so are the URLs people send: ``http://2130706433/`` is
127.0.0.1, a page may redirect to the cloud's metadata service, and the stack's own NATS
monitoring page is one URL away. So every request a hook makes goes through this executor's
forward proxy (proxy.py, a child process: ``HTTP(S)_PROXY`` for wget and Python hooks,
``--proxy-server`` for Chromium), whose plugin (``egress_plugin``, imported only there)
resolves the host once, checks each address, and connects to exactly the address it checked
(no DNS rebinding between check and connect):

- cloud metadata addresses (``169.254.169.254`` and kin) are refused;
- the stack's own services (NATS, Postgres, the API: ``EGRESS_SERVICES``) are refused — their
  ports on loopback, their whole host elsewhere (Compose service containers);
- private, loopback, link-local and other special-purpose addresses are refused unless
  ``URL_ALLOW_PRIVATE=true`` (a homelab archiving its LAN);
- a host that ``URL_ALLOWLIST`` names as a domain is allowed whatever it resolves to: the
  operator listed it explicitly.

A refusal is a ``403`` saying why, so the hook's result tells the user. The executor also checks
a task's own URL before it starts (``EgressPolicy.check``) and records every hook ``skipped``
with the reason instead of letting each fail.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import urlsplit

import msgspec

from boxcar.shared.procutil import die_with_parent

POLICY_ENV = "BOXCAR_EGRESS_POLICY"

#: Link-local metadata endpoints of cloud providers (AWS, ECS, Azure, GCP, Oracle, Alibaba, …).
METADATA_ADDRESSES = frozenset(
    ipaddress.ip_address(a) for a in ("169.254.169.254", "169.254.170.2", "fd00:ec2::254", "100.100.100.200")
)


class Refused(Exception):
    """A fetch the policy refuses; ``str()`` says why, in words for the user."""


class EgressPolicy(msgspec.Struct, frozen=True):
    """What hooks may reach.

    Attributes:
        allow_private: ``URL_ALLOW_PRIVATE``.
        services: the stack's own ``[host, port]`` endpoints (port 0: the whole host).
        allowed_hosts: host names ``URL_ALLOWLIST`` names explicitly (always reachable).
    """

    allow_private: bool = False
    services: list[tuple[str, int]] = []
    allowed_hosts: list[str] = []

    @classmethod
    def from_settings(cls, settings, environ=None) -> EgressPolicy:
        """The policy for this deployment: ``URL_ALLOW_PRIVATE``, the service URLs in the settings
        (``NATS_URL``, ``DATABASE_URL``, the API), ``EGRESS_SERVICES`` (extra ``host:port``,
        comma-separated, e.g. NATS' monitoring port) and ``URL_ALLOWLIST``'s domains."""
        environ = os.environ if environ is None else environ
        services: list[tuple[str, int]] = []
        for url in (settings.nats_url, settings.database_url, f"http://{settings.api_host}:{settings.api_port}"):
            parts = urlsplit(url or "")
            try:
                port = parts.port or 0
            except ValueError:
                port = 0
            if parts.hostname:
                services.append((parts.hostname, port))
                if parts.scheme == "nats" and port:
                    services.append((parts.hostname, 8222))  # NATS' HTTP monitoring port
        for item in environ.get("EGRESS_SERVICES", "").split(","):
            host, _, port = item.strip().rpartition(":")
            if host and port.isdigit():
                services.append((host.strip("[]"), int(port)))
        domains = [p.strip().lower().lstrip("*.") for p in settings.url_allowlist.split(",") if p.strip()]
        allowed = [d for d in domains if all(ch.isalnum() or ch in ".-" for ch in d)]
        return cls(allow_private=settings.url_allow_private, services=services, allowed_hosts=allowed)

    def to_env(self) -> str:
        return msgspec.json.encode(self).decode()

    @classmethod
    def from_env(cls) -> EgressPolicy:
        return msgspec.json.decode(os.environ.get(POLICY_ENV, "{}"), type=cls)

    def _service_addresses(self) -> list[tuple[ipaddress._BaseAddress, int]]:
        out = []
        for host, port in self.services:
            for ip in _resolve(host):
                out.append((ip, port if ip.is_loopback else 0))
        return out

    def check(self, host: str, port: int) -> str:
        """The address to connect to for ``host:port``, resolved once.

        Raises:
            Refused: the policy forbids every address the host resolves to (the reason names it).
        """
        addresses = _resolve(host)
        if not addresses:
            raise Refused(f"{host} does not resolve to any address")
        if host.lower().rstrip(".") in self.allowed_hosts:
            return str(addresses[0])
        services = self._service_addresses()
        reason = ""
        for ip in addresses:
            reason = self._refusal(ip, port, services)
            if not reason:
                return str(ip)
        raise Refused(f"{host}:{port} is refused: {reason}")

    def _refusal(self, ip, port: int, services) -> str:
        if getattr(ip, "ipv4_mapped", None):
            ip = ip.ipv4_mapped
        if ip in METADATA_ADDRESSES:
            return f"{ip} is a cloud metadata address"
        for service_ip, service_port in services:
            if ip == service_ip and service_port in (0, port):
                return f"{ip}:{port} is one of Boxcar's own services"
        if not ip.is_global and not self.allow_private:
            return f"{ip} is a private or special-purpose address (set URL_ALLOW_PRIVATE=true to archive a LAN)"
        return ""


def _resolve(host: str) -> list:
    host = host.strip("[]")
    try:
        return [ipaddress.ip_address(host)]
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError):
        return []
    return list(dict.fromkeys(ipaddress.ip_address(info[4][0].split("%")[0]) for info in infos))


def url_refusal(policy: EgressPolicy, url: str) -> str:
    """Why ``url`` may not be fetched, or ""."""
    parts = urlsplit(url)
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        return "invalid port"
    try:
        policy.check(parts.hostname or "", port)
    except Refused as exc:
        return str(exc)
    return ""


# ----------------------------------------------------------------------------- the proxy process


class EgressProxy:
    """The executor's forward proxy (proxy.py, run by ``egress_server``, with ``AckingHttpProxy``
    and ``EgressPolicyPlugin``), a child process on a free loopback port that dies with the
    executor; started again if it died.

    Raises (``start``):
        RuntimeError: it did not come up (the message has its last log lines).
    """

    def __init__(self, policy: EgressPolicy, workdir: Path) -> None:
        self.policy = policy
        self.workdir = workdir
        self.proc: subprocess.Popen | None = None
        self.port = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def start(self, timeout: float = 20.0) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        port_file, log_file = self.workdir / "egress.port", self.workdir / "egress.log"
        port_file.unlink(missing_ok=True)
        env = {k: v for k, v in os.environ.items() if k.upper() not in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY")}
        env[POLICY_ENV] = self.policy.to_env()
        with open(log_file, "ab") as log:
            self.proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "boxcar.hook_executor.egress_server",  # proxy.py, without its package's __init__
                    "--hostname",
                    "127.0.0.1",
                    "--port",
                    "0",
                    "--port-file",
                    str(port_file),
                    # proxy.py's own HTTP proxy, but acknowledging upstream data at once
                    "--disable-http-proxy",
                    "--plugins",
                    "boxcar.hook_executor.egress_plugin.AckingHttpProxy,"
                    "boxcar.hook_executor.egress_plugin.EgressPolicyPlugin",
                    "--num-acceptors",
                    "1",
                    # a thread per connection: the default "threadless" loop polls every 25 ms
                    # even with no connection (0.5 % of a core on an idle stack; this: 0.03 %)
                    "--threaded",
                    "--log-level",
                    "WARNING",
                ],
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                preexec_fn=die_with_parent(signal.SIGTERM),
            )
        deadline = time.monotonic() + timeout
        while not (port_file.exists() and port_file.read_text().strip()):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                tail = log_file.read_text(errors="replace")[-1500:]
                raise RuntimeError(f"the egress proxy did not start: {tail}")
            time.sleep(0.05)
        self.port = int(port_file.read_text().strip())

    def ensure(self) -> str:
        """The proxy's URL, starting it again first if it died."""
        if not self.running():
            self.start()
        return self.url

    def stop(self) -> None:
        """SIGTERM the proxy's process group — its main process and its forked acceptor, which
        would otherwise see the main's shutdown only at its next one-second ``select`` timeout —
        and wait for it (at most 5 s, then SIGKILL)."""
        if self.running():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGTERM)  # its own session: die_with_parent
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()


def proxy_env(url: str) -> dict[str, str]:
    """What sends a hook's HTTP(S) through the proxy (wget, Python, yt-dlp read these)."""
    return {
        "HTTP_PROXY": url,
        "HTTPS_PROXY": url,
        "http_proxy": url,
        "https_proxy": url,
        "NO_PROXY": "",
        "no_proxy": "",
    }


def chrome_proxy_args(url: str) -> list[str]:
    """Chromium's flags for the same (``<-loopback>``: loopback is proxied too, not bypassed)."""
    return [f"--proxy-server={url}", "--proxy-bypass-list=<-loopback>"]
