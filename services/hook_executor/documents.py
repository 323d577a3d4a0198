"""Documents that are not web pages (a PDF, an image, a file download), saved by ``staticfile``.

The staticfile hook names its file after the URL's last path segment, so ``…/manual`` served as
``application/pdf`` is saved as ``manual``: here it gets the extension its content type implies
(``manual.pdf``), so the archive opens it with the right program. A PDF's own ``/Title`` is read
(pypdf) into the result's ``output_json`` for the snapshot title; without one the file name is
the title.
"""

from __future__ import annotations

import logging
import mimetypes
import os
from pathlib import Path, PurePosixPath

import msgspec

from boxcar.hook_executor.hooks import HookProcess
from boxcar.shared.messages import ArchiveResultRecord, OutputFile

log = logging.getLogger(__name__)


def describe_staticfile(result: ArchiveResultRecord, proc: HookProcess, snap_dir: Path) -> ArchiveResultRecord:
    """The staticfile result with its file given a proper extension and, for a PDF, its title.

    ``output_json`` becomes ``{"content_type", "title", "file"}`` (what is known of them).
    """
    record = next((r for r in reversed(proc.records) if r.get("type") == "ArchiveResult"), {})
    content_type = str(record.get("content_type") or "").split(";")[0].strip().lower()
    relative = result.output_str
    path = snap_dir / relative if relative else None
    if path is None or not path.is_file() or path.is_symlink():
        return result
    files = dict(result.output_files)
    if content_type and not PurePosixPath(relative).suffix:
        extension = mimetypes.guess_extension(content_type, strict=False)
        if extension:
            target = path.with_name(path.name + extension)
            os.replace(path, target)
            old_key = str(PurePosixPath(relative).relative_to(proc.hook.plugin))
            meta = files.pop(old_key, None)
            new_key = old_key + extension
            files[new_key] = OutputFile(size=target.stat().st_size, mimetype=content_type)
            relative, path = relative + extension, target
            if meta is None:
                log.debug("staticfile output %s was not among its files", old_key)
    if not content_type:
        content_type = mimetypes.guess_type(path.name)[0] or ""
    info = {"content_type": content_type, "file": path.name}
    if content_type == "application/pdf":
        info["title"] = pdf_title(path) or path.stem
    return msgspec.structs.replace(result, output_str=relative, output_files=files, output_json=info)


def pdf_title(path: Path) -> str:
    """The PDF's ``/Info /Title`` (or XMP title), "" when it has none or cannot be read."""
    from pypdf import PdfReader
    from pypdf.errors import PyPdfError

    try:
        reader = PdfReader(path)
        title = (reader.metadata.title if reader.metadata else None) or ""
    except (PyPdfError, OSError, ValueError, KeyError, TypeError) as exc:
        log.info("no title read from %s: %s", path.name, exc)
        return ""
    return " ".join(str(title).split())[:512]
