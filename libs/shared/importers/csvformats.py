"""CSV exports: Pocket, Raindrop, Instapaper, and any CSV with a ``url`` column.

The first row is the header (matched case-insensitively). Cells may hold quoted commas and
newlines. Tags: Pocket separates them with ``|``, the others with commas. A ``folder`` column is a
folder, not tags: it is added to the tags only with ``folder_tags`` (Instapaper's built-in
``Unread``/``Archive``/``Starred`` and Raindrop's ``Unsorted`` are states, never tags).
"""

from __future__ import annotations

import csv
import io

from ._common import Collector, decode_bytes, split_tags, to_datetime

_URL_COLUMNS = ("url", "href", "link", "uri", "address")
_TITLE_COLUMNS = ("title", "name", "description")
_TAG_COLUMNS = ("tags", "tag", "labels")
_DATE_COLUMNS = ("time_added", "created", "created_at", "timestamp", "date", "added", "date_added", "saved_at")
_STATES = {"unread", "archive", "starred", "unsorted"}


def _header(text: str) -> tuple[list[str], str] | None:
    """The lower-cased header fields and the delimiter, when the first line looks like a header."""
    first = text.split("\n", 1)[0].strip("\r\ufeff ")
    if not first or "://" in first or len(first) > 2000:
        return None
    best: tuple[list[str], str] | None = None
    for delimiter in (",", ";", "\t"):
        try:
            fields = next(csv.reader([first], delimiter=delimiter))
        except (csv.Error, StopIteration):
            continue
        fields = [field.strip().lower() for field in fields]
        if len(fields) < 2 or any(len(field) > 64 for field in fields):
            continue
        if not any(column in fields for column in _URL_COLUMNS):
            continue
        if best is None or len(fields) > len(best[0]):
            best = (fields, delimiter)
    return best


def sniff_csv(text: str) -> str | None:
    """``pocket_csv``, ``raindrop_csv``, ``instapaper_csv``, ``csv``, or ``None`` if not CSV."""
    header = _header(text)
    if header is None:
        return None
    fields = set(header[0])
    if "time_added" in fields:
        return "pocket_csv"
    if fields & {"excerpt", "cover", "highlights", "note"} and "created" in fields:
        return "raindrop_csv"
    if "selection" in fields or ({"url", "title", "folder"} <= fields and header[0][0] == "url"):
        return "instapaper_csv"
    return "csv"


def _column(fields: list[str], names: tuple[str, ...]) -> int | None:
    for name in names:
        if name in fields:
            return fields.index(name)
    return None


def parse_csv(kind: str, data: bytes, hint: object, col: Collector, folder_tags: bool) -> None:
    """Any CSV format: one record per data row (rows with no cells at all are skipped)."""
    text = hint if isinstance(hint, str) else decode_bytes(data)
    text = text.lstrip("\ufeff \t\r\n")
    header = _header(text)
    if header is None:
        col.reject("row 0", text[:300], "no CSV header with a url column")
        return
    fields, delimiter = header
    url_i = _column(fields, _URL_COLUMNS)
    title_i = _column(fields, _TITLE_COLUMNS)
    tags_i = _column(fields, _TAG_COLUMNS)
    date_i = _column(fields, _DATE_COLUMNS)
    folder_i = _column(fields, ("folder",))
    tag_mode = "pipe" if kind == "pocket_csv" else "auto"
    reader = csv.reader(io.StringIO(text, newline=""), delimiter=delimiter)
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
            url = cell(url_i)
            col.add(
                where,
                url if url and url.strip() else None,
                title=cell(title_i),
                tags=tags,
                when=to_datetime(cell(date_i)),
                record=delimiter.join(row),
            )
        except Exception as exc:  # one bad row never drops the others
            col.reject(where, delimiter.join(row), f"unreadable row ({exc})")
