"""The media family's results: a download that did not finish is never a success.

ArchiveBox #1102: a killed yt-dlp left a partial file that looked like a complete capture. The
ytdlp hook of abx-plugins 1.13.572 already fails on a non-zero exit, but it reports ``succeeded``
whenever yt-dlp exits 0 and *any* file it knows is in the directory — a description, a thumbnail
or a subtitle written before the media itself was skipped or cut short. Here a ``succeeded``
media result must name a complete media file: leftovers of an unfinished download (``.part``,
``.ytdl``, ``.frag``) make it ``failed``, and no media file at all makes it ``noresults`` (saying
why, e.g. the file was larger than ``MEDIA_MAX_SIZE``). A video whose only source is a ``blob:``
URL (built by the page's scripts; yt-dlp cannot fetch one) is ``noresults`` too, not ``failed``:
there is nothing a retry could download.

``MEDIA_MAX_SIZE`` (``YTDLP_MAX_SIZE``): the plugin only *prefers* formats under it (its format
filter falls back to any format), so the ytdlp hook also gets ``--max-filesize`` (yt-dlp then
refuses a larger file, also one whose size shows only while it downloads).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from pathlib import PurePosixPath
from typing import Any

import msgspec

from boxcar.hook_executor.hooks import HookProcess
from boxcar.shared.messages import ArchiveResultRecord, ResultStatus
from boxcar.shared.plugins import Hook
from boxcar.shared.quirks import AfterRun, quirk

MEDIA_SUFFIXES = frozenset(
    ".mp4 .webm .mkv .avi .mov .flv .wmv .m4v .mp3 .m4a .ogg .oga .opus .wav .flac .aac .ts".split()
)
PARTIAL_SUFFIXES = (".part", ".ytdl", ".frag", ".temp", ".tmp")
_TOO_LARGE = re.compile(r"larger than max-filesize|File is larger than", re.IGNORECASE)
_ERRORS = re.compile(r"^ERROR: (?!yt-dlp error:)(.*)$", re.MULTILINE)  # yt-dlp's own errors, not the hook's summary
_BLOB = re.compile(r'Unsupported url scheme: "blob"')


def hook_env(hook: Hook, resolved: Mapping[str, Mapping[str, Any]], env: Mapping[str, str]) -> dict[str, str]:
    """Extra environment for a media hook: ``--max-filesize`` from ``YTDLP_MAX_SIZE`` for ytdlp."""
    if quirk(hook.plugin).after_run is not AfterRun.MEDIA:
        return {}
    size = str((resolved.get("ytdlp") or {}).get("YTDLP_MAX_SIZE") or "").strip()
    if not size:
        return {}
    try:
        extra = json.loads(env.get("YTDLP_ARGS_EXTRA") or "[]")
    except ValueError:
        extra = []
    if not isinstance(extra, list) or any(str(a).startswith("--max-filesize") for a in extra):
        return {}
    return {"YTDLP_ARGS_EXTRA": json.dumps([*extra, f"--max-filesize={size}"])}


def check_download(result: ArchiveResultRecord, proc: HookProcess) -> ArchiveResultRecord:
    """``result`` of a ytdlp hook, ``failed`` when a download was cut short and ``noresults`` when
    it claims success without a media file, saying why (see the module docstring)."""
    if result.status == ResultStatus.FAILED and not proc.timed_out and not proc.killed_for:
        errors = _ERRORS.findall(proc.stderr_tail(20000))
        if errors and all(_BLOB.search(e) for e in errors):
            why = "the page's media is a blob: URL (made by its scripts in the browser): nothing to download"
            return msgspec.structs.replace(result, status=ResultStatus.NORESULTS, output_str=why, notes=why)
    if (
        result.status not in (ResultStatus.SUCCEEDED, ResultStatus.NORESULTS)
        or result.output_str == "staticfile already handled"
    ):
        return result
    names = [PurePosixPath(p) for p in result.output_files]
    partial = [str(p) for p in names if p.name.endswith(PARTIAL_SUFFIXES)]
    if partial:
        why = f"download did not finish: {', '.join(sorted(partial)[:3])} left incomplete"
        return msgspec.structs.replace(result, status=ResultStatus.FAILED, notes=why, output_str=why)
    if any(p.suffix.lower() in MEDIA_SUFFIXES for p in names):
        return result
    if result.status == ResultStatus.NORESULTS and not _TOO_LARGE.search(proc.stderr_tail(20000)):
        return result  # the page has no media: the hook's own reason stands
    log = f"{proc.stderr_tail(20000)}"
    if _TOO_LARGE.search(log):
        size = proc.env.get("YTDLP_MAX_SIZE") or "MEDIA_MAX_SIZE"
        why = f"media larger than MEDIA_MAX_SIZE ({size}): not downloaded"
    else:
        why = "no media file was downloaded (only its metadata)"
    return msgspec.structs.replace(result, status=ResultStatus.NORESULTS, output_str=why, notes=why)
