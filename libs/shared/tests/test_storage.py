"""The executor's own files in a snapshot dir: recognised by name or pattern, removed when the
task ends, never listed or served (``storage.is_executor_internal``)."""

from __future__ import annotations

from pathlib import Path

from boxcar.shared.storage import is_executor_internal, remove_executor_internal


def test_the_browser_session_s_markers_are_internal_by_name_and_by_pattern(tmp_path: Path):
    chrome = tmp_path / "chrome"
    (chrome / "export-tabs").mkdir(parents=True)
    for name in ("cdp_url.txt", "export-tabs/.closing-5F2A", "navigation.json"):
        (chrome / name).write_text("x")
    assert is_executor_internal("chrome/cdp_url.txt")
    assert is_executor_internal("chrome/export-tabs/.closing-5F2A")  # a tab's marker (chrome_utils.js)
    assert not is_executor_internal("chrome/navigation.json")
    assert not is_executor_internal("wget/cdp_url.txt")  # only the chrome plugin's

    remove_executor_internal(tmp_path, ["chrome"])
    left = sorted(p.relative_to(chrome).as_posix() for p in chrome.rglob("*") if p.is_file())
    assert left == ["navigation.json"]
