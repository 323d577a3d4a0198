"""The executor's own DevTools calls on a snapshot's tab (the hooks make theirs through puppeteer).

``call`` sends one command and waits for its reply; ``tab_answers`` asks whether the tab's
renderer still runs script. Why the latter: a page can wedge its renderer so that no command on
that tab ever returns — in the shared corpus, ``la-nacion`` makes Chromium's
``Page.printToPDF`` spin forever (``chromium --headless --print-to-pdf`` alone does the same).
Each later hook on that tab then waits out a timeout of its own (``dom``, ``chrome_mhtml``,
``parse_dom_outlinks``: 60 s each, over four minutes for one page with a browser slot held,
where ArchiveBox, running the same hooks in turn, waits as long). After a hook that needs the tab
fails, the executor asks the tab to evaluate ``1``; when it cannot within ``TAB_ANSWER_S``, the
task's remaining tab hooks are recorded ``failed`` with that reason instead of being started,
and those started together with the failed one (page readers: ``order.start_batches``) are killed
with it (``task.TaskRun``).

Chrome DevTools Protocol: ``Target.attachToTarget`` (flatten), ``Runtime.evaluate``
(https://chromedevtools.github.io/devtools-protocol/tot/Runtime/#method-evaluate).
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import InvalidHandshake, InvalidURI, WebSocketException

#: The plugin that opens a snapshot's tab: its dir in the snapshot holds the tab's
#: ``cdp_url.txt`` and ``target_id.txt``, and the plugins that require it work on that tab.
TAB_PLUGIN = "chrome"

#: Seconds a tab has to evaluate ``1`` before it is taken for hung (a busy but healthy page
#: answers within milliseconds: Runtime.evaluate runs between its tasks). A page whose script
#: runs longer than that at a stretch is taken for hung too: its later tab hooks are not run, and
#: the readers running beside the failed hook are killed.
TAB_ANSWER_S = 5.0


class CdpError(ValueError):
    """Chromium answered a command with an error; ``str()`` names the command and the error."""


async def call(
    ws: ClientConnection, call_id: int, method: str, params: dict[str, Any], timeout: float, session: str | None = None
) -> dict[str, Any]:
    """Send ``method`` (on ``session``, or to the browser) and return its ``result``, skipping the
    events that arrive meanwhile. ``call_id`` must be unused on ``ws``.

    Raises:
        CdpError: Chromium answered with an error.
        TimeoutError: no answer within ``timeout`` seconds.
        websockets.exceptions.ConnectionClosed: the browser went away.
    """
    message: dict[str, Any] = {"id": call_id, "method": method, "params": params}
    if session is not None:
        message["sessionId"] = session
    await ws.send(json.dumps(message))
    async with asyncio.timeout(timeout):
        while True:
            reply = json.loads(await ws.recv())
            if reply.get("id") == call_id:
                if "error" in reply:
                    raise CdpError(f"{method}: {reply['error'].get('message')}")
                return dict(reply["result"])


async def attach_tab(chrome_dir: Path, timeout: float, max_size: int | None = None) -> tuple[ClientConnection, str]:
    """Open a DevTools connection to the browser of the snapshot's tab and attach to that tab.

    ``chrome_dir`` is the snapshot's ``chrome/`` dir, where the chrome plugin's tab hook wrote
    ``cdp_url.txt`` and ``target_id.txt``. Returns ``(ws, session_id)``: commands for the tab go
    on ``ws`` with that ``sessionId``; the attach used call id ``0``, so callers number theirs
    from 1. Closing ``ws`` detaches. ``max_size`` caps one incoming message (bytes; None: no cap).

    Raises:
        OSError: the tab's files are unreadable or empty, or the browser cannot be reached.
        TimeoutError: the connection or the attach took longer than ``timeout`` seconds.
        CdpError: the browser refused the attach (e.g. the tab is gone).
        websockets.exceptions.InvalidHandshake, InvalidURI, WebSocketException: not a DevTools
            endpoint, or the connection dropped.
    """
    cdp_url = (chrome_dir / "cdp_url.txt").read_text().strip()
    target_id = (chrome_dir / "target_id.txt").read_text().strip()
    if not cdp_url or not target_id:
        raise OSError(f"{chrome_dir}: the tab's cdp_url.txt or target_id.txt is empty")
    ws = await asyncio.wait_for(connect(cdp_url, open_timeout=timeout, max_size=max_size), timeout)
    try:
        attached = await call(ws, 0, "Target.attachToTarget", {"targetId": target_id, "flatten": True}, timeout)
    except BaseException:
        await ws.close()
        raise
    return ws, str(attached["sessionId"])


async def tab_answers(chrome_dir: Path, timeout: float = TAB_ANSWER_S) -> bool | None:
    """Whether the snapshot's tab (``chrome_dir``, as for ``attach_tab``) evaluates ``1`` within
    ``timeout`` seconds.

    Returns True when it did, False when the browser attached to it but the tab did not answer
    (its renderer is hung), None when it could not be asked (no tab yet, the browser gone or not
    answering either, an error reply): only False is a finding.
    """
    try:
        ws, session = await attach_tab(chrome_dir, timeout)
    except (OSError, TimeoutError, CdpError, InvalidHandshake, InvalidURI, WebSocketException):
        return None
    try:
        try:
            await call(ws, 1, "Runtime.evaluate", {"expression": "1", "returnByValue": True}, timeout, session)
        except TimeoutError:
            return False
        except (CdpError, WebSocketException):
            return None
        return True
    finally:
        await ws.close()  # detaches the session
