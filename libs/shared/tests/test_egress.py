"""The egress policy: "this host" in every spelling, every port the stack opens, cloud metadata in
every representation — checked as a function, and with real connections to loopback listeners
through both places that enforce it (the hook executors' proxy and the client feeds use)."""

from __future__ import annotations

import asyncio
import http.client
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest

from boxcar.hook_executor.egress import EgressProxy
from boxcar.shared.egress import EgressPolicy, Refused, RuntimePorts, embedded_ipv4, url_refusal
from boxcar.shared.fetch import policy_client
from tests.listeners import METADATA_SPELLINGS, THIS_HOST_SPELLINGS, CountingListener


@pytest.fixture
def listeners():
    made = {name: CountingListener() for name in ("nats", "api", "archive", "devtools")}
    yield made
    for listener in made.values():
        listener.close()


def lan_policy(listeners, tmp_path: Path) -> EgressPolicy:
    """A homelab's policy (``URL_ALLOW_PRIVATE=true``) with the listeners as the stack's own ports:
    NATS, the API and the archive origin configured, DevTools registered at run time."""
    ports = RuntimePorts(tmp_path / "ports")
    ports.register("devtools", listeners["devtools"].port)
    return EgressPolicy(
        allow_private=True,
        services=[("127.0.0.1", listeners[n].port) for n in ("nats", "api", "archive")],
        runtime_ports_dir=str(ports.directory),
    )


def test_this_host_in_every_spelling_is_refused_on_every_port_the_stack_opens(listeners, tmp_path):
    policy = lan_policy(listeners, tmp_path)
    for listener in listeners.values():
        for host in THIS_HOST_SPELLINGS:
            with pytest.raises(Refused, match="Boxcar's own services"):
                policy.check(host, listener.port)
    # the rest of this host is a LAN page like any other (URL_ALLOW_PRIVATE=true)
    other = socket.socket()
    other.bind(("127.0.0.1", 0))
    assert policy.check("127.0.0.1", other.getsockname()[1]) == "127.0.0.1"
    other.close()


def test_every_server_of_a_nats_cluster_and_of_a_postgres_host_list_is_the_stacks_own(tmp_path):
    from boxcar.shared.settings import Settings

    settings = Settings(
        data_dir=tmp_path,
        nats_url="nats://10.0.0.1:4222, nats://10.0.0.2:4223,nats://nats-3:4224",
        database_url="postgresql://boxcar:pw@10.0.1.1:5432,10.0.1.2:5433/boxcar?target_session_attrs=read-write",
    )
    policy = EgressPolicy.from_settings(settings, environ={})
    expected = [("10.0.0.1", 4222), ("10.0.0.2", 4223), ("10.0.0.2", 8222), ("10.0.1.1", 5432), ("10.0.1.2", 5433)]
    for host, port in expected:
        assert (host, port) in policy.services, (host, port)
    assert ("nats-3", 4224) in policy.services
    lan = EgressPolicy(allow_private=True, services=policy.services)
    for host in ("10.0.0.2", "10.0.1.2"):  # a service's other host is refused whole
        with pytest.raises(Refused, match="Boxcar's own services"):
            lan.check(host, 80)
    assert lan.check("10.0.1.3", 80) == "10.0.1.3"  # its neighbour is a LAN page


def test_the_s3_server_of_store_url_is_the_stacks_own(tmp_path):
    from boxcar.shared.settings import Settings

    on_lan = Settings(data_dir=tmp_path, store_url="s3://archive/boxcar?endpoint=http://10.0.2.5:9000")
    assert ("10.0.2.5", 9000) in EgressPolicy.from_settings(on_lan, environ={}).services
    lan = EgressPolicy(allow_private=True, services=EgressPolicy.from_settings(on_lan, environ={}).services)
    with pytest.raises(Refused, match="Boxcar's own services"):
        lan.check("10.0.2.5", 9000)
    local = EgressPolicy.from_settings(Settings(data_dir=tmp_path), environ={})
    assert all(port != 9000 for _, port in local.services)
    public = Settings(data_dir=tmp_path, store_url="s3://archive?endpoint=https://8.8.8.8")
    assert ("8.8.8.8", 443) not in EgressPolicy.from_settings(public, environ={}).services  # a CDN's neighbours


def test_this_host_is_private_without_url_allow_private():
    policy = EgressPolicy(allow_private=False)
    for host in THIS_HOST_SPELLINGS:
        with pytest.raises(Refused, match="private or special-purpose"):
            policy.check(host, 80)


def test_cloud_metadata_is_refused_in_every_representation_even_on_a_lan():
    policy = EgressPolicy(allow_private=True)
    for host in METADATA_SPELLINGS:
        assert "cloud metadata" in url_refusal(policy, f"http://{host}/latest/meta-data/"), host
    # a public IPv6 address that only *looks* like an embedding is not refused
    assert url_refusal(policy, "http://[2001:db8::a9fe:a9fe]/") == ""


def test_embedded_ipv4_unwraps_each_ipv6_form():
    import ipaddress

    ip = ipaddress.ip_address
    assert ip("127.0.0.1") in embedded_ipv4(ip("::ffff:127.0.0.1"))
    assert ip("169.254.169.254") in embedded_ipv4(ip("64:ff9b::a9fe:a9fe"))
    assert ip("10.0.0.1") in embedded_ipv4(ip("2002:a00:1::"))
    assert ip("127.0.0.1") in embedded_ipv4(ip("::ffff:0:7f00:1"))
    assert embedded_ipv4(ip("::1")) == [ip("::1")]


def test_a_runtime_port_is_refused_while_its_process_lives(tmp_path):
    ports = RuntimePorts(tmp_path / "ports")
    import subprocess
    import sys

    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        ports.register("devtools", 45678, child.pid)
        policy = EgressPolicy(allow_private=True, runtime_ports_dir=str(ports.directory))
        with pytest.raises(Refused):
            policy.check("127.0.0.1", 45678)
    finally:
        child.kill()
        child.wait()
    assert policy.check("127.0.0.1", 45678) == "127.0.0.1"  # its owner is gone: the port is free


# ----------------------------------------------------------------------------- real connections


class Redirector(BaseHTTPRequestHandler):
    """``/to?<url>`` answers 302 to that URL: an allowed page redirecting to a refused one."""

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        target = self.path.partition("?")[2]
        self.send_response(302)
        self.send_header("Location", target)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def redirector():
    server = ThreadingHTTPServer(("127.0.0.1", 0), Redirector)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def targets(listeners) -> list[str]:
    return [f"http://{host}:{listener.port}/" for listener in listeners.values() for host in THIS_HOST_SPELLINGS]


def test_feeds_client_never_connects_to_the_stack_directly_or_after_a_redirect(listeners, tmp_path, redirector):
    policy = lan_policy(listeners, tmp_path)

    async def fetch_all() -> list[str]:
        errors = []
        async with policy_client(policy, follow_redirects=True, timeout=10) as client:
            for url in targets(listeners):
                for attempt in (url, f"{redirector}/to?{url}"):
                    with pytest.raises(httpx.ConnectError) as refused:
                        await client.get(attempt)
                    errors.append(str(refused.value))
            # the redirector itself (a LAN page) is reachable: the client works at all
            assert (await client.get(f"{redirector}/to?/elsewhere", follow_redirects=False)).status_code == 302
        return errors

    errors = asyncio.run(fetch_all())
    assert all("refused by the egress policy" in e for e in errors), errors[:3]
    assert {n: listener.connections for n, listener in listeners.items()} == dict.fromkeys(listeners, 0)


def test_the_hook_proxy_never_connects_to_the_stack_directly_or_after_a_redirect(listeners, tmp_path):
    proxy = EgressProxy(lan_policy(listeners, tmp_path), tmp_path / "egress")
    proxy.start()
    try:
        for url in targets(listeners):
            conn = http.client.HTTPConnection("127.0.0.1", proxy.port, timeout=30)
            conn.request("GET", url)
            assert conn.getresponse().status == 403, url
            conn.close()
            host, _, port = url.split("//")[1].rstrip("/").rpartition(":")
            tunnel = http.client.HTTPConnection("127.0.0.1", proxy.port, timeout=30)
            tunnel.request("CONNECT", f"{host}:{port}")
            assert tunnel.getresponse().status == 403, url
            tunnel.close()
        # the proxy's own port is registered too: a page cannot make it connect to itself
        conn = http.client.HTTPConnection("127.0.0.1", proxy.port, timeout=30)
        conn.request("GET", f"http://0:{proxy.port}/")
        assert conn.getresponse().status == 403
        conn.close()
    finally:
        proxy.stop()
    assert {n: listener.connections for n, listener in listeners.items()} == dict.fromkeys(listeners, 0)
