"""Build the browser extension (``extension/``) for Chromium and Firefox: ``make extension``.

One source tree; the manifests differ only where the browsers do: Chromium runs the background as
a service worker (``background.service_worker``), Firefox as background scripts
(``background.scripts``) and wants its add-on id and data-collection statement under
``browser_specific_settings.gecko``. Writes ``dist/extension/<browser>/`` (unpacked, for
``--load-extension`` and ``web-ext lint``) and ``dist/extension/boxcar-<browser>.zip``.
"""

from __future__ import annotations

import json
import shutil
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SOURCE = ROOT / "extension"
FILES = ("api.js", "background.js", "popup.html", "popup.js", "options.html", "options.js", "extension.css")
GECKO = {
    "id": "boxcar-extension@boxcar.invalid",
    "strict_min_version": "128.0",
    "data_collection_permissions": {"required": ["none"]},
}


def manifest(browser: str) -> dict:
    """The manifest for ``chromium`` or ``firefox``.

    Raises:
        ValueError: another browser name.
    """
    base = json.loads((SOURCE / "manifest.json").read_text())
    if browser == "chromium":
        return base
    if browser == "firefox":
        base["background"] = {"scripts": ["api.js", "background.js"]}
        base["browser_specific_settings"] = {"gecko": GECKO}
        return base
    raise ValueError(f"unknown browser {browser!r}: chromium or firefox")


def build(out: Path = ROOT / "dist" / "extension") -> dict[str, Path]:
    """Write both builds under ``out``; returns ``{browser: zip path}``."""
    zips = {}
    for browser in ("chromium", "firefox"):
        folder = out / browser
        shutil.rmtree(folder, ignore_errors=True)
        (folder / "icons").mkdir(parents=True)
        for name in FILES:
            shutil.copy2(SOURCE / name, folder / name)
        for icon in sorted((SOURCE / "icons").glob("*.png")):
            shutil.copy2(icon, folder / "icons" / icon.name)
        (folder / "manifest.json").write_text(json.dumps(manifest(browser), indent=2) + "\n")
        archive = out / f"boxcar-{browser}.zip"
        with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as z:
            for path in sorted(folder.rglob("*")):
                if path.is_file():
                    z.write(path, path.relative_to(folder).as_posix())
        zips[browser] = archive
    return zips


if __name__ == "__main__":
    for browser, path in build(Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "dist" / "extension").items():
        print(f"{browser}: {path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}")
