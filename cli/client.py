"""A small client of the ingest API for the CLI: find a running stack, submit a crawl, follow it
to its seal. Light on purpose (httpx and rich only): ``boxcar add`` against a running stack starts
in a fraction of the time the services' imports would take."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import httpx
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TextColumn,
    TimeElapsedColumn,
)

STACK_FILE = ".boxcar/stack.json"  # where a running stack on a data dir says where its API is
TOKEN_FILE = ".boxcar/api_token"  # the CLI's own API token for stacks on this data dir (mode 0600)


def local_token(data_dir: Path) -> str:
    """The CLI's token for a stack on ``data_dir`` (empty when none was made yet)."""
    try:
        return (data_dir / TOKEN_FILE).read_text().strip()
    except OSError:
        return ""


def running_stack(data_dir: Path) -> dict | None:
    """The stack.json of a live stack on this data dir, or None (stale files are ignored)."""
    path = data_dir / STACK_FILE
    try:
        info = json.loads(path.read_text())
        os.kill(int(info["pid"]), 0)
        if httpx.get(f"{info['api_url']}/healthz", timeout=2).status_code == 200:
            return info
    except (OSError, ValueError, KeyError, httpx.HTTPError):
        return None
    return None


class ApiError(RuntimeError):
    """The API refused a request; the message is the API's own explanation."""


class BoxcarClient:
    """HTTP client of one Boxcar API (``base_url`` like ``http://127.0.0.1:8000``)."""

    def __init__(self, base_url: str, token: str = "", timeout: float = 30.0) -> None:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.base_url = base_url
        self.http = httpx.Client(base_url=base_url, timeout=timeout, headers=headers)

    def _call(self, method: str, path: str, **kwargs) -> Any:
        """Send a request; return the JSON body, or raise ApiError with a one-line explanation."""
        try:
            response = self.http.request(method, path, **kwargs)
        except httpx.HTTPError as exc:
            raise ApiError(f"cannot reach the Boxcar API at {self.base_url} ({exc}); is it running?") from None
        return self._check(response)

    def _check(self, response: httpx.Response) -> Any:
        if response.status_code == 401:
            raise ApiError(
                "the API refused our token: pass --token, set BOXCAR_API_TOKEN, or create one with "
                "`boxcar token create` on the server"
            )
        if response.status_code >= 400:
            try:
                body = response.json()
                detail = body.get("detail") or body
                extras = body.get("extra") or {}
                if isinstance(extras, list):  # Litestar's validation errors: [{"message", "key"}]
                    detail = "; ".join(f"{e.get('key', '')}: {e.get('message', '')}" for e in extras) or detail
            except ValueError:
                detail = response.text[:500]
            raise ApiError(str(detail))
        return response.json() if response.content else None

    def create_crawl(self, payload: dict[str, Any]) -> dict[str, Any]:
        return self._call("POST", "/api/v1/crawls", json=payload)

    def crawl(self, crawl_id: str) -> dict[str, Any]:
        return self._call("GET", f"/api/v1/crawls/{crawl_id}")

    def import_files(self, files: list[tuple[bytes, str]], params: dict[str, Any]) -> dict[str, Any]:
        """Upload exports (``[(content, file name)]``) to ``POST /api/v1/imports``: one crawl of all
        of them (formats detected from content by the server)."""
        return self._call(
            "POST", "/api/v1/imports", params=params, files=[("file", (name, data)) for data, name in files]
        )

    def status(self) -> dict[str, Any]:
        return self._call("GET", "/api/v1/status")

    def control_crawl(self, crawl_id: str, action: str) -> dict[str, Any]:
        return self._call("POST", f"/api/v1/crawls/{crawl_id}/{action}")

    def snapshots(self, crawl_id: str, limit: int = 1000) -> list[dict[str, Any]]:
        return self._call("GET", "/api/v1/snapshots", params={"crawl_id": crawl_id, "limit": limit})["items"]

    def feeds(self) -> list[dict[str, Any]]:
        return self._call("GET", "/api/v1/feeds")

    def create_feed(self, payload: dict[str, Any]) -> dict[str, Any]:
        return self._call("POST", "/api/v1/feeds", json=payload)

    def delete_feed(self, feed_id: str) -> None:
        self._call("DELETE", f"/api/v1/feeds/{feed_id}")

    def control_feed(self, feed_id: str, action: str) -> dict[str, Any]:
        return self._call("POST", f"/api/v1/feeds/{feed_id}/{action}")

    def schedules(self) -> list[dict[str, Any]]:
        return self._call("GET", "/api/v1/schedules")

    def create_schedule(self, payload: dict[str, Any]) -> dict[str, Any]:
        return self._call("POST", "/api/v1/schedules", json=payload)

    def delete_schedule(self, schedule_id: str) -> None:
        self._call("DELETE", f"/api/v1/schedules/{schedule_id}")

    def control_schedule(self, schedule_id: str, action: str) -> dict[str, Any]:
        return self._call("POST", f"/api/v1/schedules/{schedule_id}/{action}")

    def wait(
        self,
        crawl_id: str,
        *,
        console: Console,
        timeout: float | None = None,
        on_tick=None,
    ) -> dict[str, Any]:
        """Show live progress until the crawl is sealed and all its results are projected, polling
        at ``PollPace``'s pace (faster as the crawl's end nears).

        Args:
            on_tick: called once per poll (the CLI uses it to supervise an embedded stack).

        Returns:
            The final ``GET /api/v1/crawls/{id}`` body.

        Raises:
            TimeoutError: ``timeout`` seconds passed first.
        """
        started = time.monotonic()
        pace = PollPace(started)
        columns = (
            SpinnerColumn(),
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("snapshots"),
            TextColumn("{task.fields[results]}"),
            TimeElapsedColumn(),
        )
        with Progress(*columns, console=console, transient=False) as progress:
            bar = progress.add_task(f"crawl {crawl_id[-8:]}", total=None, results="")
            while True:
                state = self.crawl(crawl_id)
                snaps, results = state["snapshots"], state["results"]
                progress.update(
                    bar,
                    total=max(snaps["total"], 1),
                    completed=snaps["sealed"],
                    results=(
                        f"[green]✔ {results.get('succeeded', 0)}[/] [red]✖ {results.get('failed', 0)}[/] "
                        f"[yellow]∅ {results.get('noresults', 0)}[/] ⤼ {results.get('skipped', 0)}"
                    ),
                )
                if state["status"] == "sealed" and not state.get("results_pending"):
                    return state  # sealed, and every captured snapshot's index.jsonl written
                if timeout is not None and time.monotonic() - started > timeout:
                    raise TimeoutError(f"crawl {crawl_id} not sealed after {timeout:.0f}s (status {state['status']})")
                if on_tick is not None:
                    on_tick()
                time.sleep(pace.next(state, time.monotonic()))


def poll_interval(elapsed: float, first: float = 0.1, most: float = 1.0) -> float:
    """Seconds to wait before the next progress poll of a crawl ``elapsed`` seconds old: ``first``
    at once (a one-URL crawl, sealed in well under a second on a started stack, is seen sealed
    within a tenth of one), growing by 0.1 s per second of waiting to ``most`` (after 9 s with the
    defaults). Each poll counts the crawl's snapshots and results, work that grows with the crawl: a
    10,000-bookmark import is not counted ten times a second for its whole life."""
    return min(most, first + 0.1 * max(0.0, elapsed))


class PollPace:
    """When ``Client.wait`` polls a crawl next: ``poll_interval``'s ramp, sooner as the crawl's end
    nears. A crawl with snapshots still to seal is polled no later than its pace so far says the
    rest will be sealed (``elapsed / sealed`` seconds a snapshot; the ramp from its last new seal
    bounds that from below, so a last snapshot that takes long is soon polled once a second again);
    a sealed crawl whose last results are still being written, every ``first`` seconds. So
    ``boxcar add --wait`` on a crawl whose last snapshots keep its pace ends soon after the seal
    (0.2 s for a 130-page crawl of 30 s) rather than up to ``most`` after it; a one-snapshot crawl
    has no pace and keeps the ramp.

    Args:
        started: ``time.monotonic()`` when waiting began.
    """

    def __init__(self, started: float, first: float = 0.1, most: float = 1.0) -> None:
        self.started, self.first, self.most = started, first, most
        self.sealed, self.last_seal = 0, started

    def next(self, state: dict[str, Any], now: float) -> float:
        """Seconds to the next poll after one (at ``now``, monotonic) that read ``state`` (a
        ``GET /api/v1/crawls/{id}`` body)."""
        if state["status"] == "sealed":
            return self.first
        elapsed = now - self.started
        interval = poll_interval(elapsed, self.first, self.most)
        sealed, total = state["snapshots"]["sealed"], state["snapshots"]["total"]
        if sealed != self.sealed:
            self.sealed, self.last_seal = sealed, now
        if 0 < sealed < total:
            pace = (total - sealed) * elapsed / sealed
            quiet = poll_interval(now - self.last_seal, self.first, self.most)
            interval = min(interval, max(pace, quiet))
        return interval
