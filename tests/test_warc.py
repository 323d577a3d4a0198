"""wget's WARCs as WARC tools need them: one name per snapshot (a WACZ packager or a pywb
collection gathers them by name), ``WARC-IP-Address`` on every network record although wget goes
through the egress proxy, and files that ``warcio check`` and ``wacz create``/``wacz validate``
(py-wacz, Webrecorder's packager) accept."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from warcio.archiveiterator import ArchiveIterator

from tests.helpers import api, assert_one_gzip_member_per_record, submit, wait_sealed

BIN = Path(sys.executable).parent


def test_a_ten_page_crawl_s_warcs_have_unique_names_addresses_and_pass_warcio_and_wacz(
    sqlite_url, nats_url, make_stack, site_urls, tmp_path
):
    urls = site_urls(10)
    stack = make_stack(sqlite_url, nats_url, families=["fetch"])
    crawl_id = submit(stack, urls=urls, plugins=["wget"])
    wait_sealed(stack, crawl_id, timeout=300)
    items = api(stack).get("/api/v1/snapshots", params={"crawl_id": crawl_id}).json()["items"]
    warcs: list[Path] = []
    for item in items:
        [wget] = [r for r in item["results"] if r["plugin"] == "wget"]
        assert wget["status"] == "succeeded", wget
        names = [rel for rel in wget["output_files"] if rel.startswith("warc/")]
        assert len(names) == 1 and item["id"] in names[0], names  # named after its snapshot
        [path] = stack.data_dir.glob(f"archive/users/*/snapshots/*/*/{item['id']}/wget/{names[0]}")
        warcs.append(path)
    assert len({p.name for p in warcs}) == len(warcs) == 10

    for path in warcs:
        with open(path, "rb") as fh:
            records = list(ArchiveIterator(fh))  # read fully: digests checked as they stream
        assert_one_gzip_member_per_record(path)
        network = [r for r in records if r.rec_type in ("request", "response")]
        assert network and all(r.rec_headers.get_header("WARC-IP-Address") == "127.0.0.1" for r in network)
        [info] = [r for r in records if r.rec_type == "warcinfo"]
        assert info.rec_headers.get_header("WARC-Filename") == path.name

    check = subprocess.run([BIN / "warcio", "check", "-v", *map(str, warcs)], capture_output=True, text=True)
    assert check.returncode == 0, check.stdout[-2000:] + check.stderr[-2000:]
    wacz = tmp_path / "crawl.wacz"
    create = subprocess.run(
        [BIN / "wacz", "create", "-o", str(wacz), "--detect-pages", *map(str, warcs)], capture_output=True, text=True
    )
    assert create.returncode == 0, create.stdout[-2000:] + create.stderr[-2000:]
    validate = subprocess.run([BIN / "wacz", "validate", "-f", str(wacz)], capture_output=True, text=True)
    assert validate.returncode == 0, validate.stdout[-2000:] + validate.stderr[-2000:]


def test_boxcar_exports_a_crawl_as_a_valid_wacz_with_titles_and_text(
    sqlite_url, nats_url, make_stack, site_urls, tmp_path
):
    """``boxcar export wacz --crawl`` (and the API's ``/exports/wacz``): py-wacz's ``validate``
    passes, ``pages/pages.jsonl`` lists every page with its title and readable text, and the
    WACZ's CDXJ index has every page's URL."""
    import gzip
    import json
    import zipfile

    urls = site_urls(6)
    stack = make_stack(sqlite_url, nats_url, families=["fetch", "extract"])
    crawl_id = submit(stack, urls=urls, plugins=["wget", "htmltotext"])
    wait_sealed(stack, crawl_id, timeout=300)
    out = tmp_path / "crawl.wacz"
    run = subprocess.run(
        [BIN / "boxcar", "export", "wacz", "--crawl", crawl_id, "-o", str(out), "--data-dir", str(stack.data_dir)],
        capture_output=True,
        text=True,  # DATABASE_URL comes from the environment make_stack set
    )
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    validate = subprocess.run([BIN / "wacz", "validate", "-f", str(out)], capture_output=True, text=True)
    assert validate.returncode == 0, validate.stdout[-2000:] + validate.stderr[-2000:]
    with zipfile.ZipFile(out) as z:
        lines = z.read("pages/pages.jsonl").decode().splitlines()
        index = gzip.decompress(z.read("indexes/index.cdx.gz")).decode()
        assert json.loads(lines[0])["format"] == "json-pages-1.0"
        pages = [json.loads(line) for line in lines[1:]]
        names = z.namelist()
    assert {"datapackage.json", "datapackage-digest.json"} <= set(names)
    items = api(stack).get("/api/v1/snapshots", params={"crawl_id": crawl_id}).json()["items"]
    assert len(pages) == len(items) == 6
    by_url = {p["url"]: p for p in pages}
    for item in items:
        page = by_url[item["final_url"] or item["url"]]
        assert page["title"] == (item["title"] or item["url"]) and len(page.get("text", "")) > 20, page
        assert page["url"] in index
    response = api(stack).get(f"/api/v1/exports/wacz?crawl_id={crawl_id}")
    assert response.status_code == 200 and response.headers["content-type"] == "application/wacz"
    assert response.content[:2] == b"PK"
