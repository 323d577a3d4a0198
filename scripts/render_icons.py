"""Render the app and extension icons (PNG) from ``icons/icon.svg`` with Debian's Chromium.

Run after changing the SVG: ``.venv/bin/python scripts/render_icons.py``. The PNGs are committed
(browsers want PNG icons for installing an app and for extensions; no image library needed).
"""

from __future__ import annotations

import shutil
from pathlib import Path

from playwright.sync_api import sync_playwright

ROOT = Path(__file__).resolve().parents[1]
SVG = ROOT / "services/ingest/web/static/icons/icon.svg"
OUT = {
    ROOT / "services/ingest/web/static/icons": (32, 180, 192, 512),
    ROOT / "extension/icons": (16, 32, 48, 128),
}


def main() -> None:
    """Write ``icon-<size>.png`` into each folder of ``OUT``, and ``maskable-512.png`` (the mark
    inside the safe zone, on the accent colour) into the app's."""
    svg = SVG.read_text()
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=shutil.which("chromium") or "/usr/bin/chromium")
        page = browser.new_page()
        for folder, sizes in OUT.items():
            folder.mkdir(parents=True, exist_ok=True)
            for size in sizes:
                page.set_viewport_size({"width": size, "height": size})
                page.set_content(
                    f'<body style="margin:0">{svg.replace("<svg ", f"<svg width={size} height={size} ", 1)}'
                )
                page.screenshot(path=folder / f"icon-{size}.png", omit_background=True)
        page.set_viewport_size({"width": 512, "height": 512})
        inner = svg.replace("<svg ", "<svg width=410 height=410 ", 1)
        page.set_content(
            f'<body style="margin:0;background:#2f5bd3;display:flex;align-items:center;'
            f'justify-content:center;width:512px;height:512px">{inner}'
        )
        page.screenshot(path=ROOT / "services/ingest/web/static/icons/maskable-512.png")
        browser.close()


if __name__ == "__main__":
    main()
