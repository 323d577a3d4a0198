"""The egress proxy's connection log, read incrementally by the executor (``WARC-IP-Address``)."""

from __future__ import annotations

import os
from pathlib import Path

from boxcar.hook_executor.egress.connections import ConnectionLog


def test_addresses_since_a_time_the_latest_connection_winning(tmp_path: Path):
    writer, reader = ConnectionLog(tmp_path / "c.jsonl"), ConnectionLog(tmp_path / "c.jsonl")
    assert reader.addresses(since=0) == {}  # no log yet
    writer.append("Example.org", 443, "192.0.2.1", 100.0)
    writer.append("example.net", 80, "192.0.2.2", 200.0)
    assert reader.addresses(since=150) == {("example.net", 80): "192.0.2.2"}
    writer.append("example.org", 443, "192.0.2.9", 300.0)  # read on the next call, from where it stopped
    assert reader.addresses(since=0) == {("example.org", 443): "192.0.2.9", ("example.net", 80): "192.0.2.2"}
    assert reader.addresses(since=250) == {("example.org", 443): "192.0.2.9"}


def test_a_line_being_written_and_a_bad_line_are_not_taken(tmp_path: Path):
    path = tmp_path / "c.jsonl"
    reader = ConnectionLog(path)
    path.write_bytes(b'not json\n{"t": 5, "host": "a.test"}\n{"t": 10, "host": "b.test", "port": 80, "ip": "192.0')
    assert reader.addresses(since=0) == {}
    with open(path, "ab") as f:
        f.write(b'.2.7"}\n')
    assert reader.addresses(since=0) == {("b.test", 80): "192.0.2.7"}


def test_rotation_loses_nothing_for_a_reader_that_keeps_up(tmp_path: Path):
    path = tmp_path / "c.jsonl"
    writer, reader = ConnectionLog(path), ConnectionLog(path)
    writer.MAX_BYTES = 200  # a few lines per file
    for i in range(12):
        writer.append(f"h{i}.test", 80, f"192.0.2.{i}", 1000.0 + i)
        reader.addresses(since=0)
    kept = sum(len(p.read_text().splitlines()) for p in tmp_path.iterdir())
    assert kept < 12  # the proxy's files hold only the last few (rotated twice: gone)
    assert reader.addresses(since=0) == {(f"h{i}.test", 80): f"192.0.2.{i}" for i in range(12)}
    assert reader.addresses(since=1011) == {("h11.test", 80): "192.0.2.11"}
    assert len(ConnectionLog(path).addresses(since=0)) == kept  # a new reader: what the files hold


def test_a_reader_between_rotations_reads_the_rest_of_the_old_file_first(tmp_path: Path):
    path = tmp_path / "c.jsonl"
    writer, reader = ConnectionLog(path), ConnectionLog(path)
    writer.append("a.test", 80, "192.0.2.1", 1.0)
    assert reader.addresses(since=0) == {("a.test", 80): "192.0.2.1"}
    writer.append("b.test", 80, "192.0.2.2", 2.0)  # appended to the old file, not read yet
    os.replace(path, tmp_path / "c.jsonl.1")  # the proxy's rotation
    writer.append("c.test", 80, "192.0.2.3", 3.0)
    assert reader.addresses(since=0) == {
        ("a.test", 80): "192.0.2.1",
        ("b.test", 80): "192.0.2.2",
        ("c.test", 80): "192.0.2.3",
    }
