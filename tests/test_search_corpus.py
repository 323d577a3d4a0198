"""Full-text search on the real corpus, on SQLite and on Postgres: for 20 pages, a distinctive
4-word phrase of the page's body text (taken from the saved HTML, not from what was indexed)
finds that page first, once the stack captured them (wget, htmltotext) and the result-projector
indexed them as their results arrived."""

from __future__ import annotations

import os
import re
from collections import Counter
from html.parser import HTMLParser
from pathlib import Path

import pytest

from boxcar.ingest.access import operator
from boxcar.ingest.library import SnapshotLibrary
from boxcar.shared.db import Database
from tests.helpers import load_crawl, submit, wait_sealed

CORPUS = Path(os.environ.get("BOXCAR_SHARED_DIR", Path(__file__).resolve().parents[2] / "shared")) / "corpus"
PAGES = 20
WORD = re.compile(r"^[A-Za-z]{4,}$")


class BodyText(HTMLParser):
    """The words a reader sees in ``<body>`` (no scripts, styles or templates)."""

    SKIP = {"script", "style", "noscript", "template", "head", "svg", "iframe", "select", "button"}

    def __init__(self) -> None:
        super().__init__()
        self.depth = 0
        self.words: list[str] = []

    def handle_starttag(self, tag, attrs):
        if tag in self.SKIP:
            self.depth += 1

    def handle_endtag(self, tag):
        if tag in self.SKIP and self.depth:
            self.depth -= 1

    def handle_data(self, data):
        if not self.depth:
            self.words += data.split()


def body_words(name: str) -> list[str]:
    parser = BodyText()
    parser.feed((CORPUS / "pages" / name / "index.html").read_text(errors="replace"))
    return parser.words


def phrases(count: int) -> dict[str, str]:
    """``{page name: phrase}`` for ``count`` corpus pages: four consecutive plain words (letters
    only, 4+ long) from the middle of the body whose sequence no other chosen page contains."""
    rows = [line.split("\t") for line in (CORPUS / "manifest.tsv").read_text().splitlines()[1:]]
    names = [r[0] for r in rows if len(r) > 3 and r[3] == "capture"]
    texts = {n: body_words(n) for n in names}
    joined = {n: " ".join(w.lower() for w in words) for n, words in texts.items()}
    chosen: dict[str, str] = {}
    for name in names:
        words = texts[name]
        middle = len(words) // 3
        for start in range(middle, len(words) - 4):
            window = words[start : start + 4]
            if all(WORD.match(w) for w in window):
                phrase = " ".join(window)
                counts = Counter(phrase.lower() in text for text in joined.values())
                if counts[True] == 1:
                    chosen[name] = phrase
                    break
        if len(chosen) == count:
            break
    return chosen


@pytest.mark.skipif(not (CORPUS / "manifest.tsv").exists(), reason=f"corpus not found at {CORPUS}")
def test_a_phrase_of_the_body_finds_its_page_first(db_url, nats_url, make_stack, corpus_server):
    chosen = phrases(PAGES)
    assert len(chosen) == PAGES
    stack = make_stack(db_url, nats_url, families=["fetch", "extract"], env={"PLUGINS": "wget,htmltotext"})
    urls = {f"{corpus_server}/pages/{name}/": name for name in chosen}
    crawl_id = submit(stack, urls=list(urls), only_new=False)
    wait_sealed(stack, crawl_id, timeout=600)
    db = Database(stack.settings.sqlalchemy_url)
    _, snaps, results = load_crawl(db, crawl_id)
    ids = {s.id: urls[s.url] for s in snaps}
    assert sum(r.plugin == "htmltotext" and r.status == "succeeded" for r in results) == PAGES
    library = SnapshotLibrary(db, stack.settings.data_dir)
    misses = {}
    for snapshot_id, name in ids.items():
        hits = library.search(chosen[name], limit=3, viewer=operator("system"))
        if not hits or hits[0].id != snapshot_id:
            misses[name] = (chosen[name], [ids.get(h.id, h.id) for h in hits])
        else:
            assert "<mark>" in hits[0].snippet_html
    assert not misses, misses
