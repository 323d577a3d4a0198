"""CSV exports: Pocket, Raindrop, Instapaper, and any CSV whose rows hold a URL.

The delimiter is ``,``, ``;`` or tab. Cells may hold quoted delimiters and newlines.

- With a header row naming a URL column (``url``, ``href``, ``link``..., matched
  case-insensitively, spaces and ``-`` read as ``_``), columns are taken by name.
- Otherwise the file is CSV when every sampled row has the same number (>= 2) of fields and most
  rows have a field that is a URL (with any scheme; at least one an http(s) one), e.g. a
  browser-history export ``2024-11-13 20:00:00-05:00,https://www.example.com/,Example``; where
  more than one delimiter qualifies, the one under which more rows hold a date wins, then the one
  giving more fields (a ``;`` file whose titles hold commas). A first
  row whose fields are all non-empty names (no URL, number or date) is a header (its known column
  names are still used for title, tags, date and folder). The
  other columns are guessed per row and cell: the first field that is an http(s) URL is the URL
  (else the first URL-like field, so that ``chrome://...`` rows are rejected with their reason);
  the first other field that is a plausible date or timestamp (1990-2099) is the date; the first
  remaining non-empty, non-numeric field is the title. A file whose lines are all single URL tokens
  is a URL list (``https://maps.example/@52.5,13.4,15z``), not a header-less CSV, unless each of
  its rows also holds a date field.

Tags: Pocket separates them with ``|``, the others with commas; a tag cell that is a JSON or
Python-literal list (``["a","b"]``, ``['a', 'b']``, ``[]``) gives its items. A ``folder`` column is a
folder, not tags: it is added to the tags only with ``folder_tags`` (Instapaper's built-in
``Unread``/``Archive``/``Starred`` and Raindrop's ``Unsorted`` are states, never tags).
"""

from __future__ import annotations

import csv
import io
import re
from datetime import UTC, datetime
from typing import NamedTuple

from ._common import HTTP_TOKEN, URL_TOKEN, Collector, decode_bytes, split_tags, to_datetime, url_problem

_URL_COLUMNS = ("url", "href", "link", "uri", "address")
_TITLE_COLUMNS = ("title", "name", "description")
_TAG_COLUMNS = ("tags", "tag", "labels", "document_tags")
_DATE_COLUMNS = (
    "time_added",
    "created",
    "created_at",
    "timestamp",
    "date",
    "added",
    "date_added",
    "saved_at",
    "saved_date",
)
_STATES = {"unread", "archive", "starred", "unsorted"}
_DELIMITERS = (",", ";", "\t")
_SAMPLE_ROWS = 50
_SAMPLE_CHARS = 256 * 1024
_DATE_RANGE = (datetime(1990, 1, 1, tzinfo=UTC), datetime(2100, 1, 1, tzinfo=UTC))
_NUMERIC = re.compile(r"^[+-]?\d+(?:[.,]\d+)?$")


class _Layout(NamedTuple):
    """How to read a CSV text: its delimiter and normalised header names (``None``: no header)."""

    delimiter: str
    fields: list[str] | None


def _name(field: str) -> str:
    """A header name as matched: trimmed, lower-cased, runs of spaces/``-`` as ``_``."""
    return re.sub(r"[\s\-]+", "_", field.strip().strip("\ufeff").strip().lower())


def _header(text: str) -> tuple[list[str], str] | None:
    """The normalised header fields and the delimiter, when the first line is a header naming a
    URL column."""
    first = text.split("\n", 1)[0].strip("\r\ufeff ")
    if not first or "://" in first or len(first) > 2000:
        return None
    best: tuple[list[str], str] | None = None
    for delimiter in _DELIMITERS:
        try:
            fields = next(csv.reader([first], delimiter=delimiter))
        except (csv.Error, StopIteration):
            continue
        fields = [_name(field) for field in fields]
        if len(fields) < 2 or any(len(field) > 64 for field in fields):
            continue
        if not any(column in fields for column in _URL_COLUMNS):
            continue
        if best is None or len(fields) > len(best[0]):
            best = (fields, delimiter)
    return best


def _is_url(cell: str) -> bool:
    """A field that is one URL token with a scheme (any scheme)."""
    return URL_TOKEN.match(cell.strip()) is not None


def _is_http_url(cell: str) -> bool:
    """A field that is an archivable absolute http(s) URL."""
    cell = cell.strip()
    return HTTP_TOKEN.match(cell) is not None and url_problem(cell) is None


def _cell_date(cell: str) -> datetime | None:
    """The date/timestamp a field holds, when it is a plausible one (1990-2099), else ``None``."""
    if not any(ch.isdigit() for ch in cell):
        return None
    when = to_datetime(cell)
    return when if when is not None and _DATE_RANGE[0] <= when < _DATE_RANGE[1] else None


def _is_header(row: list[str]) -> bool:
    """A first row that names columns: no field is empty, a URL, a number or a date."""
    return all(
        cell.strip() and not _is_url(cell) and not _NUMERIC.match(cell.strip()) and _cell_date(cell) is None
        for cell in row
    )


def _sample(text: str, delimiter: str) -> list[list[str]]:
    """The first non-empty rows of ``text`` read with ``delimiter`` (a cut-off last row dropped)."""
    rows: list[list[str]] = []
    reader = csv.reader(io.StringIO(text[:_SAMPLE_CHARS], newline=""), delimiter=delimiter)
    try:
        for row in reader:
            if any(cell.strip() for cell in row):
                rows.append(row)
                if len(rows) > _SAMPLE_ROWS:
                    return rows[:_SAMPLE_ROWS]
    except csv.Error:
        return rows[:-1]
    return rows[:-1] if len(text) > _SAMPLE_CHARS else rows


def _guess_layout(text: str) -> _Layout | None:
    """The layout of a CSV without a header naming its URL column (see the module docstring)."""
    lines = [line.strip() for line in text[:_SAMPLE_CHARS].splitlines() if line.strip()][:_SAMPLE_ROWS]
    # Lines that are all single URL tokens are a URL list (a comma in them is part of the URL)
    # unless every one of them also holds a date field, e.g. "https://a.example/,A,1731546000".
    bare = all(HTTP_TOKEN.match(line) for line in lines)
    best: tuple[tuple[int, int], _Layout] | None = None
    for delimiter in _DELIMITERS:
        rows = _sample(text, delimiter)
        if not rows or len(rows[0]) < 2 or any(len(row) != len(rows[0]) for row in rows):
            continue
        header = rows[0] if _is_header(rows[0]) else None
        data = rows if header is None else rows[1:]
        with_url = sum(1 for row in data if any(_is_url(cell) for cell in row))
        if with_url * 2 <= len(data):
            continue
        if not any(_is_http_url(cell) for row in data for cell in row):
            continue
        dated = sum(1 for row in data if any(_cell_date(cell) for cell in row))
        if bare and dated < len(data):
            continue
        # the delimiter under which more rows hold a date, then the one with more columns: a
        # title with commas in a ";" file ("https://a.example/;A,,;2000-01-01") splits into as many
        # cells on "," but leaves no date cell there
        score = (dated, len(rows[0]))
        if best is None or score > best[0]:
            fields = None if header is None else [_name(field) for field in header]
            best = (score, _Layout(delimiter, fields))
    return best[1] if best else None


def _layout(text: str) -> _Layout | None:
    """How to read ``text`` as CSV, or ``None`` when it is not a CSV of URLs."""
    header = _header(text)
    if header is not None:
        return _Layout(header[1], header[0])
    return _guess_layout(text)


def _guess_row(row: list[str], named: set[int]) -> tuple[str | None, str | None, datetime | None]:
    """``(url, title, date)`` of a row whose URL column is not named (``named``: the columns that
    a header names, which are not guessed)."""
    cells = [(i, cell.strip()) for i, cell in enumerate(row) if i not in named and cell.strip()]
    url_i = next((i for i, cell in cells if _is_http_url(cell)), None)
    if url_i is None:
        url_i = next((i for i, cell in cells if _is_url(cell)), None)
    date_i, when = next(((i, d) for i, cell in cells if i != url_i and (d := _cell_date(cell))), (None, None))
    title = next(
        (c for i, c in cells if i not in (url_i, date_i) and not _is_url(c) and not _NUMERIC.match(c)),
        None,
    )
    return (row[url_i] if url_i is not None else None), title, when


def sniff_csv(text: str) -> str | None:
    """``pocket_csv``, ``raindrop_csv``, ``instapaper_csv``, ``readwise_csv``, ``csv``, or ``None``
    when ``text`` is not a CSV of URLs."""
    header = _header(text)
    if header is None:
        return "csv" if _guess_layout(text) is not None else None
    fields = set(header[0])
    if "time_added" in fields:
        return "pocket_csv"
    if fields & {"excerpt", "cover", "highlights", "note"} and "created" in fields:
        return "raindrop_csv"
    if "selection" in fields or ({"url", "title", "folder"} <= fields and header[0][0] == "url"):
        return "instapaper_csv"
    if "document_tags" in fields or {"reading_progress", "saved_date"} <= fields:
        return "readwise_csv"
    return "csv"


def _column(fields: list[str], names: tuple[str, ...]) -> int | None:
    for name in names:
        if name in fields:
            return fields.index(name)
    return None


def parse_csv(kind: str, data: bytes, hint: object, col: Collector, folder_tags: bool) -> None:
    """Any CSV format: one record per data row (rows with no cells at all are skipped).

    A row without a URL is rejected ("no URL in record"), as is a row whose URL is not http(s);
    a row the CSV reader cannot read is rejected and the reading goes on.
    """
    text = hint if isinstance(hint, str) else decode_bytes(data)
    text = text.lstrip("\ufeff \t\r\n")
    layout = _layout(text)
    if layout is None:
        col.reject("row 0", text[:300], "no CSV header with a url column and no rows with a URL field")
        return
    delimiter, fields = layout.delimiter, layout.fields or []
    url_i = _column(fields, _URL_COLUMNS)
    title_i = _column(fields, _TITLE_COLUMNS)
    tags_i = _column(fields, _TAG_COLUMNS)
    date_i = _column(fields, _DATE_COLUMNS)
    folder_i = _column(fields, ("folder",))
    named = {i for i in (title_i, tags_i, date_i, folder_i) if i is not None}
    tag_mode = "pipe" if kind == "pocket_csv" else "auto"
    reader = csv.reader(io.StringIO(text, newline=""), delimiter=delimiter)
    if layout.fields is not None:
        try:
            next(reader)
        except (csv.Error, StopIteration):
            return
    number = 0
    while True:
        number += 1
        where = f"row {number}"
        try:
            row = next(reader)
        except StopIteration:
            break
        except csv.Error as exc:
            col.reject(where, "", f"malformed CSV row ({exc})")
            if len(col.rejected) > 100_000:  # the reader is stuck: stop rather than loop
                break
            continue
        if not any(cell.strip() for cell in row):
            continue

        def cell(index: int | None, row: list[str] = row) -> str | None:
            return row[index] if index is not None and index < len(row) else None

        try:
            tags = split_tags(cell(tags_i) or "", tag_mode)
            folder = (cell(folder_i) or "").strip()
            if folder_tags and folder and folder.lower() not in _STATES:
                tags += folder.split("/")
            if url_i is not None:
                url, title, when = cell(url_i), cell(title_i), to_datetime(cell(date_i))
            else:
                url, title, when = _guess_row(row, named)
                if title_i is not None:
                    title = cell(title_i)
                if date_i is not None:
                    when = to_datetime(cell(date_i))
            col.add(
                where,
                url if url and url.strip() else None,
                title=title,
                tags=tags,
                when=when,
                record=delimiter.join(row),
            )
        except Exception as exc:  # one bad row never drops the others
            col.reject(where, delimiter.join(row), f"unreadable row ({exc})")
