"""wget's WARC files, made fit for WARC tools once the hook has written them.

The wget plugin names its WARC ``warc/<unix seconds>.warc.gz``, so the snapshots of one crawl
captured in the same second share a file name (harmless on disk, one directory each, but every
tool that gathers WARCs by name — WACZ packagers, pywb collections — drops or refuses the
duplicates). And wget goes through the executor's egress proxy, so its records carry no
``WARC-IP-Address`` (WARC 1.1 §5.11: the address the record's content came from). ``finalize``
rewrites each new WARC of the task as ``warc/<seconds>-<snapshot_id>.warc.gz`` with the address
the proxy connected to for each record's host (``egress.connections.ConnectionLog``), the warcinfo's
``WARC-Filename`` to match, every other header and every block as wget wrote them (block
digests stay valid: headers are not part of them), and removes the original.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from urllib.parse import urlsplit

from warcio.archiveiterator import ArchiveIterator
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


def _rewrite(source: Path, target: Path, addresses: dict[tuple[str, int], str]) -> None:
    tmp = target.with_name(target.name + ".tmp")
    with open(source, "rb") as inp, open(tmp, "wb") as out:
        writer = _VerbatimWriter(out, gzip=True)
        for record in ArchiveIterator(inp, no_record_parse=True, check_digests=False):
            headers = record.rec_headers
            if record.rec_type == "warcinfo" and headers.get_header("WARC-Filename"):
                headers.replace_header("WARC-Filename", target.name)
            if record.rec_type in NETWORK_RECORDS and not headers.get_header("WARC-IP-Address"):
                ip = _address(headers.get_header("WARC-Target-URI") or "", addresses)
                if ip:
                    headers.add_header("WARC-IP-Address", ip)
            writer.write_record(record)
    os.replace(tmp, target)


def _address(uri: str, addresses: dict[tuple[str, int], str]) -> str:
    try:
        parts = urlsplit(uri.strip("<>"))
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        return ""
    return addresses.get(((parts.hostname or "").lower(), port), "")
