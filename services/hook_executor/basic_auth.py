"""HTTP Basic auth for the browser hooks, given to the tab over CDP instead of in the URL.

A page behind Basic auth (``https://user:password@host/…``) used to reach the browser hooks as
``--url`` with its userinfo: Chromium answered the challenge from the URL, and kept the URL —
password included — in the profile's session files for as long as the browser ran. Now the
browser hooks get the URL without credentials, and while the task runs ``BasicAuthResponder``
holds a DevTools session on the snapshot's tab (the target the ``chrome_tab`` hook opened) with
``Fetch.enable(handleAuthRequests=true)``: every paused request is continued as it is, and an
auth challenge is answered with the credentials (``Fetch.continueWithAuth``) only when it comes
from a server of the page's own origin; any other origin's or a proxy's challenge is cancelled.
Closing the session (at the task's end) turns the interception off. The credentials live only
in this process's memory.

Chrome DevTools Protocol: ``Target.attachToTarget`` (flatten), ``Fetch.enable``,
``Fetch.requestPaused`` → ``Fetch.continueRequest``, ``Fetch.authRequired`` →
``Fetch.continueWithAuth`` (https://chromedevtools.github.io/devtools-protocol/tot/Fetch/).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import logging
from pathlib import Path

from websockets.asyncio.client import ClientConnection

from boxcar.hook_executor import cdp
from boxcar.shared.urls import origin

log = logging.getLogger(__name__)

#: CDP messages can carry request bodies; more than this and the connection closes (the task's
#: hooks go on, the page's requests are no longer paused)
MAX_MESSAGE = 64 * 1024 * 1024


class BasicAuthResponder:
    """Answers the tab's auth challenges for one page (see the module docstring).

    Args:
        chrome_dir: the snapshot's ``chrome/`` dir, where the tab hook wrote ``cdp_url.txt`` and
            ``target_id.txt``.
        page_url: the page's URL without credentials (its origin gets them).
        username, password: the credentials, already percent-decoded.

    Raises (``start``):
        what ``cdp.attach_tab`` raises: the tab's DevTools address or target is unreadable, the
            browser cannot be reached or refused the session.
    """

    def __init__(self, chrome_dir: Path, page_url: str, username: str, password: str) -> None:
        self.chrome_dir = chrome_dir
        self.origin = origin(page_url)
        self.username = username
        self.password = password
        self.answered = 0
        self._ids = itertools.count(1)
        self._ws: ClientConnection | None = None
        self._loop: asyncio.Task | None = None

    async def start(self, timeout: float = 10.0) -> None:
        """Attach to the tab (``cdp.attach_tab``) and turn on auth handling; returns once the
        command is sent."""
        self._ws, self.session = await cdp.attach_tab(self.chrome_dir, timeout, max_size=MAX_MESSAGE)
        self._loop = asyncio.create_task(self._serve())
        await self._send("Fetch.enable", {"handleAuthRequests": True, "patterns": [{"urlPattern": "*"}]})

    async def close(self) -> None:
        """Detach (Chromium stops pausing the tab's requests) and forget the credentials."""
        self.password = ""
        if self._loop is not None:
            self._loop.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._loop
        if self._ws is not None:
            with contextlib.suppress(Exception):
                await self._ws.close()

    async def _send(self, method: str, params: dict) -> None:
        message = {"id": next(self._ids), "method": method, "params": params, "sessionId": self.session}
        await self._ws.send(json.dumps(message))

    async def _serve(self) -> None:
        try:
            async for raw in self._ws:
                message = json.loads(raw)
                method = message.get("method")
                if message.get("sessionId") != self.session:
                    continue
                params = message.get("params") or {}
                if method == "Fetch.requestPaused":
                    await self._send("Fetch.continueRequest", {"requestId": params["requestId"]})
                elif method == "Fetch.authRequired":
                    await self._answer(params)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # the browser went away, or the task's end closed the socket
            log.debug("basic auth responder stopped: %s", exc)

    async def _answer(self, params: dict) -> None:
        challenge = params.get("authChallenge") or {}
        sent_from = origin(challenge.get("origin", ""))
        ours = challenge.get("source") == "Server" and bool(sent_from) and sent_from == self.origin
        if ours and self.password:
            self.answered += 1
            response = {"response": "ProvideCredentials", "username": self.username, "password": self.password}
        else:
            response = {"response": "CancelAuth"}
        await self._send(
            "Fetch.continueWithAuth", {"requestId": params["requestId"], "authChallengeResponse": response}
        )
