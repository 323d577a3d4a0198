"""Reading what users hand to ``boxcar add``: URLs and files of URLs."""

from __future__ import annotations

import re
from pathlib import Path

URL_IN_TEXT = re.compile(r"https?://[^\s<>\"']+", re.IGNORECASE)


class InputFileError(ValueError):
    """A FILE argument could not be read or held no URL."""


def expand_args(args: list[str]) -> list[str]:
    """Turn CLI arguments into URLs: a URL stays a URL; a FILE contributes the URLs in it.

    A file is read as text, one URL per line (blank lines and ``#`` comments skipped); URLs inside
    longer lines are found too.

    Raises:
        InputFileError: an argument is neither a URL nor a readable file with URLs in it.
    """
    urls: list[str] = []
    for arg in args:
        if re.match(r"^[a-z][a-z0-9+.-]*://", arg, re.IGNORECASE):
            urls.append(arg)
            continue
        path = Path(arg)
        if not path.is_file():
            raise InputFileError(f"{arg}: not a URL and not a file")
        try:
            text = path.read_text(encoding="utf-8", errors="replace")
        except OSError as exc:
            raise InputFileError(f"{arg}: {exc.strerror}") from None
        found = [
            m.group(0).rstrip(".,;:!?)")
            for line in text.splitlines()
            if line.strip() and not line.lstrip().startswith("#")
            for m in URL_IN_TEXT.finditer(line)
        ]
        if not found:
            raise InputFileError(f"{arg}: no http(s) URL found in the file")
        urls.extend(found)
    return urls
