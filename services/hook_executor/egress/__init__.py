"""The executor's egress proxy: every request a hook makes goes through it.

``HTTP(S)_PROXY`` for wget, Python hooks and yt-dlp, ``--proxy-server`` for Chromium (loopback
included). The proxy is proxy.py in a child process (``server``, without proxy.py's package
``__init__``), with ``plugin.EgressPolicyPlugin`` applying ``boxcar.shared.egress.EgressPolicy``
to every upstream connection: it resolves the host once, checks each address, and connects to
exactly the address it checked, for the page and for every redirect. A refusal is a ``403``
saying why, so the hook's result tells the user. The executor also checks a task's own URL before
it starts (``egress.url_refusal``) and records every hook ``skipped`` with the reason instead of
letting each fail.

The proxy registers its own port with ``RuntimePorts``, so no page can make it connect to itself.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from boxcar.hook_executor.egress.connections import CONNECTIONS_ENV, ConnectionLog
from boxcar.shared.egress import POLICY_ENV, EgressPolicy, RuntimePorts
from boxcar.shared.procutil import die_with_parent


class EgressProxy:
    """The executor's forward proxy (proxy.py, run by ``server``, with ``AckingHttpProxy``,
    ``EgressPolicyPlugin`` and ``LeanHttpProtocolHandler``), a child process on a free loopback port that dies with the
    executor; started again if it died.

    Raises (``start``):
        RuntimeError: it did not come up (the message has its last log lines).
    """

    def __init__(self, policy: EgressPolicy, workdir: Path) -> None:
        self.policy = policy
        self.workdir = workdir
        self.proc: subprocess.Popen | None = None
        self.port = 0
        self._registered: Path | None = None
        #: where the proxy connected (``WARC-IP-Address`` for wget's records)
        self.connections = ConnectionLog(workdir / "connections.jsonl")

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
        env[CONNECTIONS_ENV] = str(self.connections.path)
        with open(log_file, "ab") as log:
            self.proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "boxcar.hook_executor.egress.server",  # proxy.py, without its package's __init__
                    "--hostname",
                    "127.0.0.1",
                    "--port",
                    "0",
                    "--port-file",
                    str(port_file),
                    # proxy.py's own HTTP proxy, but acknowledging upstream data at once
                    "--disable-http-proxy",
                    "--plugins",
                    "boxcar.hook_executor.egress.plugin.AckingHttpProxy,"
                    "boxcar.hook_executor.egress.plugin.EgressPolicyPlugin",
                    "--num-acceptors",
                    "1",
                    # a thread per connection: the default "threadless" loop polls every 25 ms
                    # even with no connection (0.5 % of a core on an idle stack; this: 0.03 %)
                    "--threaded",
                    # each connection's loop without asyncio's per-pass cost or 25 ms polling
                    "--work-klass",
                    "boxcar.hook_executor.egress.plugin.LeanHttpProtocolHandler",
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
        if self.policy.runtime_ports_dir:  # a page must not make the proxy connect to itself
            ports = RuntimePorts(self.policy.runtime_ports_dir)
            self._registered = ports.register(f"egress-{self.port}", self.port, self.proc.pid)

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
        if self._registered is not None:
            RuntimePorts.unregister(self._registered)
            self._registered = None


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
