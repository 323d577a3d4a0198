"""What the two kinds of warm start (``zygote_client``'s forks, ``node_hosts``' Node hosts) share."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Hashable

#: Environment variables a hook gets that differ from task to task or run to run: the snapshot's
#: and the task's directories (``SNAP_DIR``, ``TMP_DIR``: ``task.py``; a browser's tasks share
#: ``CRAWL_DIR``, its generation's directory, which other values contain), and what
#: ``environment.HookEnvironment.hook_env`` sets for each run, its context (``EXTRA_CONTEXT``:
#: snapshot, hook) and its trace parent (the W3C carrier's keys, upper-cased). A Node host leaves
#: them out of the environment under which it remembers abx-plugins' computed config
#: (``node_config_memo.js``), so that the runs of one crawl share it. abx-plugins' base schema reads the
#: first three as string properties of their own names, which the host sets to the run's own
#: values (and checks that no other setting uses them); it reads none of the rest. A per-run key
#: missing here only costs reuse; never list one that ``loadConfig`` reads otherwise (``HOME``).
PER_RUN_ENV = ("SNAP_DIR", "TMP_DIR", "EXTRA_CONTEXT", "TRACEPARENT", "TRACESTATE", "BAGGAGE")

#: Seconds after a warm interpreter or Node host failed to start before it is tried again (the
#: hooks meanwhile start cold, as they would with ``WARM_HOOKS=false``).
RETRY_AFTER = 60.0


async def pipe_reader(
    loop: asyncio.AbstractEventLoop, fd: int, limit: int = 16 * 1024 * 1024
) -> tuple[asyncio.StreamReader, asyncio.BaseTransport]:
    """A stream reader on the pipe or FIFO ``fd``, which it takes over (closed with the transport).

    Args:
        limit: the reader's buffer limit in bytes (a longer line raises in ``readline``).
    Returns:
        ``(reader, transport)``; close the transport to drop a pipe no writer will ever close.
    """
    reader = asyncio.StreamReader(limit=limit, loop=loop)
    protocol = asyncio.StreamReaderProtocol(reader, loop=loop)
    transport, _ = await loop.connect_read_pipe(lambda: protocol, os.fdopen(fd, "rb", 0))
    return reader, transport


class StartFailures:
    """When each warm starter (keyed by name) last failed to start: it is not tried again for
    ``retry_after`` seconds, so a broken one costs one failed start a minute, not one per hook, and
    one that failed for a passing reason (memory, a binary being replaced) comes back."""

    def __init__(self, retry_after: float = RETRY_AFTER) -> None:
        self.retry_after = retry_after
        self._at: dict[Hashable, float] = {}

    def record(self, key: Hashable) -> None:
        """``key`` failed to start just now."""
        self._at[key] = time.monotonic()

    def blocked(self, key: Hashable) -> bool:
        """True while ``key`` failed less than ``retry_after`` seconds ago."""
        at = self._at.get(key)
        if at is None:
            return False
        if time.monotonic() - at >= self.retry_after:
            del self._at[key]
            return False
        return True
