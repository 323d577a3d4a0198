"""``warc.finalize`` on WARCs written by warcio as wget writes them: a whole one is renamed after
its snapshot with ``WARC-IP-Address`` on its network records; a truncated one (wget killed mid-write)
is kept as it is, and nothing half-written is left beside it."""

from __future__ import annotations

import io
import os
from pathlib import Path

from warcio.archiveiterator import ArchiveIterator
from warcio.statusandheaders import StatusAndHeaders
from warcio.warcwriter import WARCWriter

from boxcar.hook_executor.warc import finalize

URL = "http://example.test:8080/page.html"


def _wget_warc(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as out:
        writer = WARCWriter(out, gzip=True)
        writer.write_record(writer.create_warcinfo_record(path.name, {"software": "Wget/1.21"}))
        body = os.urandom(20_000)  # does not compress: the cut below falls inside its member
        http = StatusAndHeaders("200 OK", [("Content-Type", "text/html")], protocol="HTTP/1.1")
        writer.write_record(writer.create_warc_record(URL, "response", payload=io.BytesIO(body), http_headers=http))


def test_a_whole_warc_is_renamed_with_the_address_of_each_network_record(tmp_path: Path):
    plugin = tmp_path / "wget"
    _wget_warc(plugin / "warc" / "1796500000.warc.gz")
    renamed = finalize(plugin, "S1", 0, {("example.test", 8080): "192.0.2.7"})
    assert renamed == ["warc/1796500000-S1.warc.gz"]
    assert sorted(p.name for p in (plugin / "warc").iterdir()) == ["1796500000-S1.warc.gz"]
    with open(plugin / renamed[0], "rb") as fh:
        records = list(ArchiveIterator(fh))  # digests checked as they stream
    [info, response] = records
    assert info.rec_headers.get_header("WARC-Filename") == "1796500000-S1.warc.gz"
    assert response.rec_headers.get_header("WARC-IP-Address") == "192.0.2.7"


def test_a_truncated_warc_is_kept_as_wget_left_it_and_no_partial_copy_remains(tmp_path: Path):
    plugin = tmp_path / "wget"
    original = plugin / "warc" / "1796500000.warc.gz"
    _wget_warc(original)
    with open(original, "r+b") as fh:  # the response record's member cut short
        fh.truncate(os.path.getsize(original) - 3_000)
    before = original.read_bytes()
    assert finalize(plugin, "S1", 0, {("example.test", 8080): "192.0.2.7"}) == []
    assert sorted(p.name for p in (plugin / "warc").iterdir()) == ["1796500000.warc.gz"]
    assert original.read_bytes() == before
