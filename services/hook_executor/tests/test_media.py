"""The media family's results: what a ytdlp result may claim (``media.check_download``), and
``MEDIA_MAX_SIZE`` as yt-dlp's ``--max-filesize`` (``media.hook_env``)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import pytest

from boxcar.hook_executor import media
from boxcar.shared.messages import ArchiveResultRecord, OutputFile
from boxcar.shared.plugins import get_catalog


@dataclass
class FakeRun:
    """What ``check_download`` reads of a ``HookProcess``."""

    stderr: str = ""
    env: dict = field(default_factory=dict)
    timed_out: bool = False
    killed_for: str = ""

    def stderr_tail(self, limit: int) -> str:
        return self.stderr[-limit:]


def result(status: str, output_str: str, *files: str) -> ArchiveResultRecord:
    return ArchiveResultRecord(
        id="r",
        snapshot_id="s",
        plugin="ytdlp",
        hook_name="on_Snapshot__31_ytdlp.finite.bg",
        status=status,
        output_str=output_str,
        output_files={name: OutputFile(size=1, mimetype="") for name in files},
    )


def test_a_whole_media_file_stays_a_success():
    done = result("succeeded", "ytdlp/clip.mp4", "clip.mp4", "clip.info.json", "clip.description")
    assert media.check_download(done, FakeRun()) is done


def test_an_unfinished_download_is_failed_even_when_the_hook_says_succeeded():
    cut = media.check_download(
        result("succeeded", "ytdlp/clip.description", "clip.description", "clip.mp4.part"), FakeRun()
    )
    assert cut.status == "failed" and "clip.mp4.part" in cut.notes and "did not finish" in cut.output_str


def test_metadata_without_media_is_not_a_success():
    only_meta = media.check_download(
        result("succeeded", "ytdlp/clip.description", "clip.description", "clip.jpg"), FakeRun()
    )
    assert only_meta.status == "noresults" and "no media file" in only_meta.output_str


@pytest.mark.parametrize("status", ["succeeded", "noresults"])
def test_a_file_over_media_max_size_says_so(status):
    log = "[download] File is larger than max-filesize (26526 bytes > 10240 bytes). Aborting.\n"
    capped = media.check_download(result(status, "No media found"), FakeRun(log, {"YTDLP_MAX_SIZE": "10k"}))
    assert (
        capped.status == "noresults" and capped.output_str == "media larger than MEDIA_MAX_SIZE (10k): not downloaded"
    )


def test_a_blob_video_is_noresults_but_other_errors_stay_failed():
    blob = 'ERROR: Unable to handle request: Unsupported url scheme: "blob" (requests, urllib, websockets)\n'
    assert media.check_download(result("failed", "yt-dlp error: …"), FakeRun(blob)).status == "noresults"
    other = blob + "ERROR: [generic] x: HTTP Error 500\n"
    assert media.check_download(result("failed", "yt-dlp error: …"), FakeRun(other)).status == "failed"
    assert media.check_download(result("failed", "Timed out"), FakeRun(blob, timed_out=True)).status == "failed"


def test_media_max_size_becomes_max_filesize():
    catalog = get_catalog()
    [hook] = catalog.snapshot_hooks(["ytdlp"])
    resolved = catalog.resolve_config(["ytdlp"], {"MEDIA_MAX_SIZE": "20m"})
    extra = media.hook_env(hook, resolved, {"YTDLP_ARGS_EXTRA": '["--no-mtime"]'})
    assert json.loads(extra["YTDLP_ARGS_EXTRA"]) == ["--no-mtime", "--max-filesize=20m"]
    assert media.hook_env(hook, resolved, {"YTDLP_ARGS_EXTRA": '["--max-filesize=1g"]'}) == {}  # the operator's wins
    [gallery] = catalog.snapshot_hooks(["gallerydl"])
    assert media.hook_env(gallery, resolved, {}) == {}
