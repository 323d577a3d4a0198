"""The WARC files of a snapshot: wget's made fit for WARC tools, and one of what the browser received.

The wget plugin names its WARC ``warc/<unix seconds>.warc.gz``, so the snapshots of one crawl
captured in the same second share a file name (harmless on disk, one directory each, but every
tool that gathers WARCs by name — WACZ packagers, pywb collections — drops or refuses the
duplicates). And wget goes through the executor's egress proxy, so its records carry no
``WARC-IP-Address`` (WARC 1.1 §5.11: the address the record's content came from). ``finalize``
rewrites each new WARC of the task as ``warc/<seconds>-<snapshot_id>.warc.gz`` with the address
the proxy connected to for each record's host (``egress.connections.ConnectionLog``), the warcinfo's
``WARC-Filename`` to match, every other header and every block as wget wrote them (block
digests stay valid: headers are not part of them), and removes the original.

wget does not run scripts, so what a page's scripts fetch is not in its WARC. ``from_responses``
writes a second WARC, ``responses/warc/<seconds>-<snapshot_id>-browser.warc.gz``, from what the browser
received (the ``responses`` plugin's bodies), so a page built by JavaScript replays too.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import zlib
from datetime import UTC, datetime
from http import HTTPStatus
from pathlib import Path
from typing import Any, BinaryIO
from urllib.parse import urlsplit

from warcio.archiveiterator import ArchiveIterator
from warcio.statusandheaders import StatusAndHeaders
from warcio.warcwriter import WARCWriter

log = logging.getLogger(__name__)

#: Records whose content came from the network (WARC-IP-Address applies to them).
NETWORK_RECORDS = ("request", "response", "revisit")


def finalize(plugin_dir: Path, snapshot_id: str, since_ns: int, addresses: dict[tuple[str, int], str]) -> list[str]:
    """Rewrite the WARCs wget wrote in ``plugin_dir/warc`` since ``since_ns`` (see the module
    docstring); returns the new names (relative to ``plugin_dir``). A WARC that cannot be read is
    left as it is (and logged): the capture is never lost to this step."""
    warc_dir = plugin_dir / "warc"
    if not warc_dir.is_dir():
        return []
    renamed = []
    for path in sorted(warc_dir.glob("*.warc.gz")):
        if snapshot_id in path.name or path.stat().st_mtime_ns < since_ns:
            continue
        target = path.with_name(f"{path.name.removesuffix('.warc.gz')}-{snapshot_id}.warc.gz")
        try:
            _rewrite(path, target, addresses)
        except Exception as exc:  # a truncated WARC (wget killed): keep what there is
            log.warning("%s: could not rewrite %s: %s", snapshot_id, path, exc)
            target.unlink(missing_ok=True)
            continue
        path.unlink()
        renamed.append(str(target.relative_to(plugin_dir)))
    return renamed


class _VerbatimWriter(WARCWriter):
    """warcio's writer, keeping the digests wget computed instead of adding its own (warcio would
    add a payload digest computed over a block it did not parse into HTTP headers and payload)."""

    def ensure_digest(self, record, block=True, payload=True) -> None:
        pass


#: zlib level of the records Boxcar writes (wget's WARC rewritten, the browser's WARC). warcio's
#: writer compresses at 9: 13.2 ms of CPU for a corpus page's WARC (77 KiB), against 8.3 ms at
#: zlib's default, 6, for 0.5 % more bytes.
GZIP_LEVEL = 6


class _GzipMembers:
    """The file object warcio's writer writes to, gzipping each record as a member of its own at
    ``GZIP_LEVEL`` (WARC 1.1, annex D: one member per record, so readers can seek to a record).
    The writer calls ``flush`` once, at the end of each record, which ends the member."""

    def __init__(self, out: BinaryIO) -> None:
        self.out = out
        self._member: Any = None

    def write(self, data: bytes) -> None:
        if self._member is None:
            self._member = zlib.compressobj(GZIP_LEVEL, zlib.DEFLATED, zlib.MAX_WBITS + 16)
        self.out.write(self._member.compress(data))

    def flush(self) -> None:
        if self._member is not None:
            self.out.write(self._member.flush())
            self._member = None
        self.out.flush()


def _rewrite(source: Path, target: Path, addresses: dict[tuple[str, int], str]) -> None:
    """Write ``source`` to ``target`` as the module docstring says.

    Raises:
        ValueError: a record ends before its ``Content-Length`` (wget was killed mid-write, or a
            member is corrupt): nothing is written, so ``finalize`` keeps the original.
        OSError: the copy could not be written (its partial file is removed).
    """
    tmp = target.with_name(target.name + ".tmp")
    try:
        with open(source, "rb") as inp, open(tmp, "wb") as out:
            writer = _VerbatimWriter(_GzipMembers(out), gzip=False)
            for record in ArchiveIterator(inp, no_record_parse=True, check_digests=False):
                headers = record.rec_headers
                if record.rec_type == "warcinfo" and headers.get_header("WARC-Filename"):
                    headers.replace_header("WARC-Filename", target.name)
                if record.rec_type in NETWORK_RECORDS and not headers.get_header("WARC-IP-Address"):
                    ip = _address(headers.get_header("WARC-Target-URI") or "", addresses)
                    if ip:
                        headers.add_header("WARC-IP-Address", ip)
                writer.write_record(record)
                short = getattr(record.raw_stream, "limit", 0)  # warcio's LimitReader: bytes not there
                if short:
                    raise ValueError(f"a {record.rec_type} record is {short} bytes short of its Content-Length")
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def _address(uri: str, addresses: dict[tuple[str, int], str]) -> str:
    try:
        parts = urlsplit(uri.strip("<>"))
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        return ""
    return addresses.get(((parts.hostname or "").lower(), port), "")


# --------------------------------------------------------------------------- the browser's responses

#: The browser's WARC: ``responses/warc/<seconds>-<snapshot_id>-browser.warc.gz``.
BROWSER_WARC_DIR = "warc"

#: Response headers of the page kept from the ``headers`` plugin; the others describe a transfer
#: (its encoding, its length before decoding) that the recorded body, as Chromium decoded it, no
#: longer has.
_TRANSFER_HEADERS = frozenset({"content-encoding", "transfer-encoding", "content-length", "connection", "keep-alive"})


def from_responses(
    plugin_dir: Path,
    snapshot_id: str,
    page_headers: dict,
    addresses: dict[tuple[str, int], str],
    software: str,
) -> str | None:
    """Write what the browser received as a WARC: one ``response`` record per body the
    ``responses`` plugin kept (``plugin_dir/index.jsonl``: ``url``, ``method``, ``status``,
    ``mimeType``, ``ts``, ``path``), so a page whose content its scripts fetched replays in
    ReplayWeb.page and pywb (wget's WARC has the page and its requisites, not what scripts load).

    Args:
        plugin_dir: the snapshot's ``responses`` directory.
        snapshot_id: names the file ``warc/<seconds>-<snapshot_id>-browser.warc.gz`` (``-browser``:
            never wget's name, which a WACZ would hold under the same ``archive/`` folder).
        page_headers: the ``headers`` plugin's ``headers.json`` (``final_url``/``url``,
            ``response_headers``) or ``{}``: the page's own response keeps its real headers.
        addresses: (host, port) → the address the egress proxy connected to (``WARC-IP-Address``).
        software: the ``software`` field of the warcinfo record.

    Returns:
        The file's path relative to ``plugin_dir``, or None when there was nothing to write (no
        index, no GET response with a body).

    The plugin keeps bodies, status and MIME type but not the HTTP headers, so the records' HTTP
    headers are ``Content-Type`` and ``Content-Length`` (the warcinfo says so), except the page's,
    which come from the ``headers`` plugin without the transfer headers (the body is decoded).
    Only ``GET`` responses are written (a replayed POST needs its request body, which the plugin
    does not keep); 3xx/4xx/5xx responses are not kept by the plugin. Written to a temporary name
    and renamed: a crash leaves no half WARC under the final name.
    """
    entries = []  # (entry, its WARC-Date, its body's size): only those whose body is there
    for entry, when in _response_entries(plugin_dir / "index.jsonl"):
        try:
            entries.append((entry, when, (plugin_dir / entry["path"]).stat().st_size))
        except OSError:
            continue
    if not entries:
        return None
    page_url = str(page_headers.get("final_url") or page_headers.get("url") or "")
    real_headers = {
        str(k): str(v)
        for k, v in (page_headers.get("response_headers") or {}).items()
        if str(k).lower() not in _TRANSFER_HEADERS and not str(k).startswith(":")  # HTTP/2's :status
    }
    seconds = int(min(when for _, when, _ in entries).timestamp())
    target = plugin_dir / BROWSER_WARC_DIR / f"{seconds}-{snapshot_id}-browser.warc.gz"
    target.parent.mkdir(exist_ok=True)
    tmp = target.with_name(target.name + ".tmp")
    written = 0
    with open(tmp, "wb") as out:
        writer = WARCWriter(_GzipMembers(out), gzip=False, warc_version="WARC/1.1")  # at GZIP_LEVEL
        info = {
            "software": software,
            "format": "WARC File Format 1.1",
            "description": (
                "What Chromium received while the page loaded, from abx-plugins' responses plugin: bodies as "
                "the browser decoded them; HTTP headers are Content-Type and Content-Length only, except the "
                "page's own response (its headers from the headers plugin)."
            ),
        }
        writer.write_record(writer.create_warcinfo_record(target.name, info))
        for entry, when, size in entries:
            headers = _http_headers(entry, size, real_headers if entry["url"] == page_url else {})
            extra = {"WARC-Date": when.strftime("%Y-%m-%dT%H:%M:%SZ")}
            ip = _address(entry["url"], addresses)
            if ip:
                extra["WARC-IP-Address"] = ip
            try:
                body = open(plugin_dir / entry["path"], "rb")  # noqa: SIM115 - closed below
            except OSError:  # gone since it was listed
                continue
            with body:
                record = writer.create_warc_record(
                    entry["url"],
                    "response",
                    payload=body,
                    length=size,
                    http_headers=StatusAndHeaders(headers[0], headers[1], protocol="HTTP/1.1"),
                    warc_headers_dict=extra,
                )
                writer.write_record(record)
            written += 1
    if not written:
        tmp.unlink()
        with contextlib.suppress(OSError):  # only if empty: never an earlier run's WARC
            target.parent.rmdir()
        return None
    os.replace(tmp, target)
    return str(target.relative_to(plugin_dir))


def _response_entries(index: Path) -> list[tuple[dict, datetime]]:
    """The index's GET entries with an http(s) URL, a status, a timestamp and a body path inside
    the plugin's directory, each with its timestamp parsed (a line that is not that is skipped:
    the plugin may have been killed mid-line)."""
    out = []
    try:
        lines = index.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return []
    for line in lines:
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if not isinstance(entry, dict) or entry.get("method") != "GET":
            continue
        url, path, status, ts = entry.get("url"), entry.get("path"), entry.get("status"), entry.get("ts")
        if not (isinstance(url, str) and url.startswith(("http://", "https://"))):
            continue
        if not (isinstance(path, str) and isinstance(status, int) and isinstance(ts, str) and 100 <= status <= 599):
            continue
        rel = Path(path)
        if rel.is_absolute() or ".." in rel.parts:
            continue
        try:
            when = _warc_date(ts)
        except ValueError:
            continue
        out.append((entry, when))
    return out


def _warc_date(ts: str) -> datetime:
    """The plugin's ``20261203T184501`` (UTC) as a datetime."""
    return datetime.strptime(ts, "%Y%m%dT%H%M%S").replace(tzinfo=UTC)


def _http_headers(entry: dict, size: int, real: dict[str, str]) -> tuple[str, list[tuple[str, str]]]:
    """The status line and headers of one record (see ``from_responses``)."""
    status = int(entry["status"])
    try:
        reason = HTTPStatus(status).phrase
    except ValueError:
        reason = ""
    statusline = f"{status} {reason}".strip()
    if real:
        return statusline, [*real.items(), ("Content-Length", str(size))]
    kind = str(entry.get("mimeType") or "") or "application/octet-stream"
    return statusline, [("Content-Type", kind), ("Content-Length", str(size))]
