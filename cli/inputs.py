"""Reading what users hand to ``boxcar add``: URLs, and files in any format Boxcar imports."""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING

import msgspec

if TYPE_CHECKING:
    from boxcar.shared import importers

# The importers (feedparser, the CSV/HTML formats' compiled patterns) are imported where a file is
# read: ~0.13 s of every ``boxcar`` start, which a ``boxcar add URL`` never needs.
_SCHEME = re.compile(r"^[a-z][a-z0-9+.-]*://", re.IGNORECASE)


class InputFileError(ValueError):
    """An argument is neither a URL nor a readable file, or a file holds no URL."""


def split_args(args: list[str]) -> tuple[list[str], list[Path]]:
    """Separate URL arguments from FILE arguments.

    Raises:
        InputFileError: an argument is neither (message names it).
    """
    urls, files = [], []
    for arg in args:
        if _SCHEME.match(arg):
            urls.append(arg)
        elif Path(arg).is_file():
            files.append(Path(arg))
        else:
            raise InputFileError(f"{arg}: not a URL (http://… or https://…) and not a file")
    return urls, files


def read_file(path: Path) -> bytes:
    """A file's bytes, checked to be text (the server parses it).

    Raises:
        InputFileError: unreadable, or a binary file.
    """
    from boxcar.shared import importers

    try:
        data = path.read_bytes()
    except OSError as exc:
        raise InputFileError(f"{path}: {exc.strerror}") from None
    if importers.looks_binary(data):
        raise InputFileError(f"{path}: a binary file, not a list of URLs or an export")
    return data


def parse_file(path: Path, format: str | None = None) -> importers.ImportResult:
    """Parse a file with the importers, for ``--dry-run`` only (format detected from its content).

    Raises:
        InputFileError: unreadable, binary, unknown ``format``, or no URL found.
    """
    from boxcar.shared import importers

    data = read_file(path)
    try:
        result = importers.parse(data, format)
    except importers.UnknownFormat:
        raise InputFileError(f"unknown format {format!r}; one of {', '.join(importers.FORMATS)}") from None
    if not result.entries:
        raise InputFileError(f"{path}: no http(s) URL found (format tried: {result.format})")
    return result


def rejected_json(rejected) -> dict:
    """A rejected entry (``importers.Rejected``) as JSON: where, value, reason."""
    return msgspec.to_builtins(rejected)
