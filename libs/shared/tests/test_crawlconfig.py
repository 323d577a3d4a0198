"""A crawl's settings: an allow-list of per-crawl keys, typed, merged once, and the hook
environment built from them."""

from __future__ import annotations

import pytest

from boxcar.shared.crawlconfig import ConfigError, CrawlConfig
from boxcar.shared.plugins import get_catalog
from boxcar.shared.settings import Settings


def build(overrides=None, environ=None, **settings) -> CrawlConfig:
    return CrawlConfig.build(Settings(**settings), get_catalog(), overrides or {}, environ=environ or {})


@pytest.mark.parametrize(
    "key, value",
    [
        ("WGET_ARGS_EXTRA", ["--post-file=/etc/passwd"]),
        ("WGET_ARGS_EXTRA", '["--post-file=/etc/passwd"]'),
        ("NODE_OPTIONS", "--import=data:text/javascript,1"),
        ("PYTHONWARNINGS", "ignore"),
        ("BROWSER", "sh -c id"),
        ("WGET_BINARY", "/bin/sh"),
        ("LD_PRELOAD", "/tmp/x.so"),
        ("PATH", "/tmp"),
        ("HTTP_PROXY", "http://evil"),
        ("CHROME_SANDBOX", "false"),
        ("SNAP_DIR", "/etc"),
        ("SOMETHING_ELSE", "1"),
    ],
)
def test_keys_that_are_not_per_crawl_settings_are_refused_by_name(key, value):
    with pytest.raises(ConfigError) as info:
        build({key: value})
    assert info.value.key == key


@pytest.mark.parametrize(
    "key, value, message",
    [
        ("WGET_TIMEOUT", "abc", "whole number"),
        ("TIMEOUT", 0, "between"),
        ("WGET_ENABLED", "perhaps", "true or false"),
        ("USER_AGENT", "{TWOCAPTCHA_API_KEY}", "braces"),
        ("USER_AGENT", "a\nb", "control"),
        ("CRAWL_MAX_URLS", -1, "between"),
        ("URL_DENYLIST", "([", "invalid regex"),
        ("RESOLUTION", "huge", "WIDTH,HEIGHT"),
        ("MEDIA_MAX_SIZE", "a lot", "size"),
        ("COOKIES_FILE", "cookies.txt", "COOKIES_DIR"),
    ],
)
def test_ill_typed_values_are_refused_saying_why(key, value, message):
    with pytest.raises(ConfigError, match=message):
        build({key: value})


def test_values_are_typed_aliases_canonical_and_boxcar_settings_explicit():
    config = build({"SAVE_WARC": False, "WGET_TIMEOUT": 30, "USE_WGET": "yes"}, crawl_max_urls=5)
    assert config.values["WGET_WARC_ENABLED"] == "false" and config.values["WGET_ENABLED"] == "true"
    assert config.values["WGET_TIMEOUT"] == "30"
    assert (config.max_urls, config.only_new) == (5, True)


def test_the_environment_s_per_crawl_settings_are_captured_the_rest_left_to_the_machine():
    config = build(environ={"WGET_TIMEOUT": "99", "WGET_ARGS_EXTRA": '["--x"]', "PATH": "/bin"})
    assert config.values["WGET_TIMEOUT"] == "99" and "WGET_ARGS_EXTRA" not in config.values
    machine = {"WGET_TIMEOUT": "5", "WGET_ENABLED": "false", "WGET_ARGS_EXTRA": '["--x"]', "PATH": "/bin"}
    hook_env = config.plugin_environ(machine)
    # a per-crawl key comes from the crawl (the planner's value), never from the executor's env
    assert hook_env["WGET_TIMEOUT"] == "99" and "WGET_ENABLED" not in hook_env
    assert hook_env["WGET_ARGS_EXTRA"] == '["--x"]' and hook_env["PATH"] == "/bin"
    assert "CRAWL_MAX_URLS" not in hook_env


def test_a_cookies_file_is_chosen_by_name_from_the_operators_directory(tmp_path):
    (tmp_path / "site.txt").write_text("# Netscape HTTP Cookie File\n")
    config = build({"COOKIES_FILE": "site.txt"}, cookies_dir=tmp_path)
    assert config.values["COOKIES_FILE"] == str(tmp_path / "site.txt")
    for bad in ("../etc/passwd", "/etc/passwd", "missing.txt"):
        with pytest.raises(ConfigError):
            build({"COOKIES_FILE": bad}, cookies_dir=tmp_path)


def test_the_default_plugins_are_switched_and_timed_per_crawl_by_archivebox_names():
    """Every default plugin's ``<PLUGIN>_ENABLED`` and ``<PLUGIN>_TIMEOUT`` (and ArchiveBox's
    aliases such as ``SAVE_MEDIA``, ``MEDIA_TIMEOUT``) may be set per crawl, and reach the hooks."""
    from boxcar.shared.settings import DEFAULT_PLUGINS

    catalog = get_catalog()
    for plugin in DEFAULT_PLUGINS:
        properties = catalog[plugin].schema.get("properties") or {}
        for key, value in ((f"{plugin.upper()}_ENABLED", False), (f"{plugin.upper()}_TIMEOUT", 15)):
            if key in properties:
                assert build({key: value}).values[key] == str(value).lower(), key
    config = build({"SAVE_MEDIA": False, "MEDIA_TIMEOUT": 100, "MEDIA_MAX_SIZE": "20m", "SINGLEFILE_TIMEOUT": 50})
    assert config.values == {**config.values, "YTDLP_ENABLED": "false", "YTDLP_TIMEOUT": "100"}
    assert config.values["MEDIA_MAX_SIZE"] == "20m" and config.values["SINGLEFILE_TIMEOUT"] == "50"
    resolved = catalog.resolve_config(["ytdlp", "singlefile"], config.plugin_environ({}))
    assert resolved["ytdlp"]["YTDLP_ENABLED"] is False and resolved["ytdlp"]["YTDLP_MAX_SIZE"] == "20m"
    assert resolved["singlefile"]["SINGLEFILE_TIMEOUT"] == 50
    assert "ytdlp" not in catalog.enabled_plugins(["ytdlp", "wget"], config.plugin_environ({}))


@pytest.mark.parametrize(
    "key, value, message",
    [
        # the probe's inputs: each would have lifted an operator limit
        ("SNAPSHOT_MAX_SIZE", 0, "would lift the operator's limit"),
        ("CRAWL_MAX_URLS", 10_000_000, "only lower the operator's limit of 10000"),
        ("CRAWL_MAX_URLS", 0, "would lift"),
        ("CRAWL_MAX_CONCURRENT_SNAPSHOTS", 1024, "only lower the operator's limit of 8"),
        ("RESOLUTION", "99999,99999", "may not exceed"),
        ("CRAWL_TIMEOUT", 0, None),  # the operator's default is 0 (no limit): nothing to lift
        ("MAX_URL_ATTEMPTS", 4, "only lower the operator's limit of 3"),
        ("TIMEOUT", 61, "only lower the operator's limit of 60 seconds"),
        ("YTDLP_TIMEOUT", 10_000, "only lower"),
        ("MEDIA_MAX_SIZE", "5g", "only lower"),
    ],
)
def test_a_crawl_may_lower_the_operators_limits_but_never_raise_them(key, value, message):
    if message is None:
        build({key: value})
        return
    with pytest.raises(ConfigError, match=message) as info:
        build({key: value})
    assert info.value.key == key


def test_lower_values_are_taken_and_an_operator_without_a_limit_allows_any():
    config = build(
        {"CRAWL_MAX_URLS": 5, "SNAPSHOT_MAX_SIZE": "10m", "TIMEOUT": 30, "RESOLUTION": "800,600", "CRAWL_TIMEOUT": 60}
    )
    assert (config.max_urls, config.snapshot_max_size, config.crawl_timeout) == (5, 10 * 1024**2, 60)
    # an operator who set no limit (0) lets a crawl choose any value, 0 included
    assert build({"CRAWL_MAX_URLS": 0}, crawl_max_urls=0).max_urls == 0
    # the operator's own viewport is the ceiling where they set one
    with pytest.raises(ConfigError, match="operator's 1280,720"):
        build({"SCREENSHOT_RESOLUTION": "1920,1080"}, environ={"RESOLUTION": "1280,720"})
