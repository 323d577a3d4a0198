"""A snapshot's readable text, read through the archive store (``archive_store``): the body of its
search document (the projector), the text compared between two captures and the page text of a
WACZ export (ingest). One rule for all three:

the succeeded result of each text source in ``quirks.text_sources()`` order (``htmltotext``, then
``trafilatura``, then ``staticfile``), and of its output files (sorted) the first ``.txt``/``.md``
with text in it, or a ``.pdf``'s text (pypdf); at most ``search.MAX_BODY_CHARS`` characters, and
at most ``MAX_FILE_BYTES`` read of one text file. Only files inside the result's plugin dir are
read (a hook's output list names files; a planted symlink out of the dir reads as missing).
"""

from __future__ import annotations

import io
import logging
from collections.abc import Iterable
from typing import Any, Protocol

from boxcar.shared.archive_store import ArchiveStore, StoreUnavailable, check_key
from boxcar.shared.messages import ResultStatus
from boxcar.shared.quirks import text_sources
from boxcar.shared.search import MAX_BODY_CHARS

log = logging.getLogger("boxcar.archive_text")

#: bytes read at most of one text file
MAX_FILE_BYTES = 4 * 1024 * 1024
TEXT_SUFFIXES = (".txt", ".md")


class TextResult(Protocol):
    """What is read of an ArchiveResult row (or record)."""

    plugin: str
    status: str
    output_files: dict[str, Any] | None


def readable_text(store: ArchiveStore, output_dir: str, results: Iterable[TextResult]) -> str:
    """The snapshot's readable text (the module's rule), "" when it has none.

    Args:
        store: the archive's store.
        output_dir: the snapshot's directory, relative to the archive root (``Snapshot.output_dir``).
        results: the snapshot's results (any plugins; only succeeded text sources are read).

    Raises:
        StoreUnavailable: the store did not answer (the caller retries later).
    """
    ok = {r.plugin: r for r in results if r.status == ResultStatus.SUCCEEDED}
    for plugin in text_sources():
        result = ok.get(plugin)
        if result is None:
            continue
        for rel in sorted(result.output_files or {}):
            lower = rel.lower()
            if not lower.endswith((*TEXT_SUFFIXES, ".pdf")):
                continue
            try:
                root = check_key(f"{output_dir}/{plugin}")
                key = check_key(f"{root}/{rel}")
                data = store.read_inside(key, root, None if lower.endswith(".pdf") else MAX_FILE_BYTES)
            except (ValueError, FileNotFoundError):
                continue
            except StoreUnavailable:
                raise
            except OSError as exc:
                log.warning("cannot read %s/%s for its text: %s", output_dir, rel, exc)
                continue
            text = pdf_text(data, rel) if lower.endswith(".pdf") else data.decode("utf-8", "replace")
            if text.strip():
                return text[:MAX_BODY_CHARS]
    return ""


def pdf_text(data: bytes, name: str = "") -> str:
    """The text of a PDF's pages, at most ``MAX_BODY_CHARS``; "" for a damaged one (logged: it is
    still archived, just not searchable)."""
    from pypdf import PdfReader

    out: list[str] = []
    size = 0
    try:
        for page in PdfReader(io.BytesIO(data)).pages:
            text = page.extract_text() or ""
            out.append(text)
            size += len(text)
            if size >= MAX_BODY_CHARS:
                break
    except Exception as exc:
        log.warning("no text from %s: %s", name or "a PDF", exc)
    return "\n".join(out)[:MAX_BODY_CHARS]
