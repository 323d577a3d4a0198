"""Warm Node hosts: hooks run one after another in one Node process, each as it would run as a
program of its own (argv, environment, cwd, streams, exit code, fresh modules), and nothing one
leaves behind reaches the next. Real Node, real pipes; the browser hooks themselves run in a host
in every browser test of the suite (``WARM_NODE_HOSTS`` is on by default)."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import textwrap
from pathlib import Path

import abx_plugins
import pytest

from boxcar.hook_executor.hooks import HookProcess
from boxcar.hook_executor.warm import node_hosts
from boxcar.hook_executor.warm.common import PER_RUN_ENV
from boxcar.hook_executor.warm.node_hosts import NodeHosts, hostable
from boxcar.shared.plugins import parse_hook

NODE = shutil.which("node")
pytestmark = pytest.mark.skipif(NODE is None, reason="node is needed for the Node hosts")

#: Like abx-plugins' hooks: a helper module beside them (outside node_modules), an async main
#: that ends with process.exit, and a .catch that reports a failure and exits 1.
HELPER = "let calls = 0;\nmodule.exports = { count: () => ++calls };\n"
PROBE = """
const fs = require("fs");
const { count } = require("../base/helper.js");
async function main() {
  console.log("console line");
  process.stdout.write("stream line\\n");
  fs.writeFileSync(1, "file line\\n");
  fs.writeSync(1, JSON.stringify({ type: "ArchiveResult", status: "succeeded", output_str: process.argv[2] }) + "\\n");
  process.stderr.write("to stderr\\n");
  fs.writeFileSync("out.json", JSON.stringify({
    argv: process.argv.slice(2), cwd: process.cwd(), only: process.env.ONLY || null,
    shared: process.env.SHARED, calls: count(), main: require.main === module,
  }));
  if (process.env.LEAVE_TIMER) setInterval(() => console.log("late"), 5);
  if (process.env.LEAVE_RAW_TIMER) require("timers").setInterval(() => console.log("late"), 5);
  // like the one ticking timer Node's fetch keeps for all its timeouts: not the hook's to stop
  if (process.env.LEAVE_UNREFD_TIMER) setInterval(() => console.log("late"), 5).unref();
  if (process.env.LATE_REJECTION) setTimeout(() => Promise.reject(new Error("late rejection")), 30).unref();
  process.exit(Number(process.env.CODE || 0));
}
main().catch((error) => {
  console.log(JSON.stringify({ type: "ArchiveResult", status: "failed", output_str: String(error) }));
  process.exit(1);
});
"""


def make_hook(tmp_path: Path, name: str, body: str):
    plugins = tmp_path / "plugins"
    (plugins / "base").mkdir(parents=True, exist_ok=True)
    (plugins / "base" / "helper.js").write_text(HELPER)
    path = plugins / name / f"on_Snapshot__54_{name}.js"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(body))
    return parse_hook(name, path)


async def run(hosts: NodeHosts, hook, snap: Path, env: dict[str, str], *args: str, timeout: int = 30) -> HookProcess:
    proc = HookProcess(
        hook,
        [NODE, hook.path, *args],
        snap / hook.plugin,
        {"PATH": "/usr/bin:/bin", **env},
        timeout,
        margin=0,
        kill_grace=0.5,
        spawner=hosts,
    )
    await proc.start()
    await proc.wait()
    return proc


async def closing(hosts: NodeHosts, scenario):
    try:
        return await scenario
    finally:
        await hosts.aclose()


def make_file_hook(tmp_path: Path, plugin: str, name: str, body: str = ""):
    path = tmp_path / "plugins" / plugin / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(body))
    return parse_hook(plugin, path)


def test_the_browsers_hooks_listeners_and_tab_are_hosted_not_its_launch_or_other_hooks(tmp_path):
    assert hostable(make_hook(tmp_path, "title", ""))
    assert hostable(make_file_hook(tmp_path, "responses", "on_Snapshot__24_responses.daemon.bg.js"))
    assert hostable(make_file_hook(tmp_path, "chrome", "on_Snapshot__01_chrome_tab.daemon.bg.js"))
    assert hostable(make_file_hook(tmp_path, "staticfile", "on_Snapshot__26_staticfile.daemon.bg.js"))
    assert not hostable(make_hook(tmp_path, "singlefile", ""))
    assert not hostable(make_file_hook(tmp_path, "chrome", "on_Snapshot__00_chrome_launch.daemon.bg.js"))
    assert not hostable(make_file_hook(tmp_path, "headers", "on_CrawlSetup__27_headers.daemon.bg.js"))


#: Takes a lock as staticfile and the tab daemon do: with abx-plugins' own ``acquireSessionLock``
#: (a file created exclusively, with the pid inside); ``FLAGS=number``: created with ``O_EXCL``.
LOCKER = """
const fs = require("fs");
const lock = process.env.LOCK;
async function main() {
  let release = () => fs.unlinkSync(lock);
  if (process.env.FLAGS === "number") {
    const { O_CREAT, O_EXCL, O_WRONLY } = fs.constants;
    fs.closeSync(fs.openSync(lock, O_CREAT | O_EXCL | O_WRONLY));
  } else {
    release = await require(process.env.CHROME_UTILS).acquireSessionLock(lock);
  }
  if (process.env.RELEASE) release();
  fs.closeSync(fs.openSync("plain.txt", "w"));  // not a lock: opened, not created exclusively
  if (process.env.HELD_BY_ANOTHER) {  // broken and taken by someone else before this run's end
    fs.writeFileSync(`${lock}.other`, JSON.stringify({ pid: 1 }));
    fs.renameSync(`${lock}.other`, lock);
  }
  process.exit(0);
}
main();
"""
CHROME_UTILS = str(Path(abx_plugins.__file__).parent / "plugins" / "chrome" / "chrome_utils.js")


@pytest.mark.parametrize(
    ("env", "hosts_started"),
    [({"RELEASE": "1"}, 1), ({"HELD_BY_ANOTHER": "1"}, 1), ({}, 2), ({"FLAGS": "number"}, 2)],
    ids=["released", "taken-by-another", "left-behind", "left-behind-O_EXCL"],
)
def test_a_run_that_leaves_a_lock_naming_its_pid_retires_its_host(tmp_path, env, hosts_started):
    hook = make_file_hook(tmp_path, "staticfile", "on_Snapshot__26_staticfile.daemon.bg.js", LOCKER)
    hosts = NodeHosts(tmp_path / "hosts")
    lock = tmp_path / "downloads" / ".download.lock"
    lock.parent.mkdir()
    (tmp_path / "node_modules").mkdir()  # chrome_utils.js asks for one; acquireSessionLock needs nothing in it
    locker = {"LOCK": str(lock), "CHROME_UTILS": CHROME_UTILS, "NODE_MODULES_DIR": str(tmp_path / "node_modules")}

    async def scenario():
        first = await run(hosts, hook, tmp_path / "a", {**locker, **env})
        lock.unlink(missing_ok=True)  # as the next taker does once the pid inside is dead
        second = await run(hosts, hook, tmp_path / "b", {**locker, "RELEASE": "1"})
        return first, second

    first, second = asyncio.run(closing(hosts, scenario()))
    assert (first.exit_code, second.exit_code) == (0, 0), (bytes(first._stderr), bytes(second._stderr))
    # a lock left behind names a pid that is gone once its run has ended, as after a process's exit
    assert hosts.started == hosts_started
    if hosts_started == 2:
        assert first.pid != second.pid


def test_hooks_in_one_host_each_see_their_own_argv_environment_cwd_streams_and_modules(tmp_path):
    hook = make_hook(tmp_path, "title", PROBE)
    hosts = NodeHosts(tmp_path / "hosts")

    async def scenario():
        first = await run(hosts, hook, tmp_path / "a", {"ONLY": "first", "SHARED": "1", "CODE": "3"}, "--url=one")
        second = await run(hosts, hook, tmp_path / "b", {"SHARED": "2"}, "--url=two")
        return first, second

    first, second = asyncio.run(closing(hosts, scenario()))
    assert hosts.started == 1  # the second hook ran in the first one's host
    assert first.exit_code == 3 and second.exit_code == 0
    for proc, url, snap in ((first, "--url=one", tmp_path / "a"), (second, "--url=two", tmp_path / "b")):
        lines = proc._stdout_tail
        assert lines[:3] == ["console line", "stream line", "file line"]
        assert [r["output_str"] for r in proc.records] == [url]  # the .catch never reported a second one
        assert bytes(proc._stderr) == b"to stderr\n"
        seen = json.loads((snap / "title" / "out.json").read_text())
        assert seen["argv"] == [url] and seen["cwd"] == str(snap / "title") and seen["main"] is True
        assert seen["calls"] == 1  # the helper module was loaded afresh for each hook
    assert json.loads((tmp_path / "a" / "title" / "out.json").read_text())["only"] == "first"
    assert json.loads((tmp_path / "b" / "title" / "out.json").read_text())["only"] is None  # env replaced whole


def test_a_host_started_for_a_hook_does_not_carry_that_hooks_crawl_in_its_environment(tmp_path):
    """A host outlives the hook it was started for and runs other crawls' hooks: its process is
    started without the per-run keys (``PER_RUN_ENV``), which the hook itself still gets. (Before,
    ``/proc/<pid>/environ`` of every host named its first hook's crawl: the fault harness counted
    idle hosts as that crawl's orphans.)"""
    hook = make_hook(tmp_path, "title", PROBE)
    hosts = NodeHosts(tmp_path / "hosts")
    context = json.dumps({"crawl_id": "crawl-one", "snapshot_id": "snap-one"})

    async def scenario():
        proc = await run(hosts, hook, tmp_path / "a", {"ONLY": "first", "EXTRA_CONTEXT": context, "CODE": "0"})
        (host,) = [h for h in hosts._all if h.alive()]
        environ = Path(f"/proc/{host.pid}/environ").read_bytes().split(b"\0")
        return proc, {item.partition(b"=")[0].decode() for item in environ if item}

    proc, host_keys = asyncio.run(closing(hosts, scenario()))
    assert proc.exit_code == 0
    assert json.loads((tmp_path / "a" / "title" / "out.json").read_text())["only"] == "first"  # the hook's own env
    assert "ONLY" in host_keys and "PATH" in host_keys
    assert not host_keys & set(PER_RUN_ENV), sorted(host_keys)


@pytest.mark.parametrize("leave", ["LEAVE_TIMER", "LEAVE_RAW_TIMER", "LEAVE_UNREFD_TIMER"])
def test_what_a_hook_leaves_running_never_writes_into_the_next(tmp_path, leave):
    hook = make_hook(tmp_path, "title", PROBE)
    hosts = NodeHosts(tmp_path / "hosts")

    async def scenario():
        first = await run(hosts, hook, tmp_path / "a", {"SHARED": "1", leave: "1"}, "--url=one")
        await asyncio.sleep(0.1)  # the leftover timer would have fired ~20 times by now
        second = await run(hosts, hook, tmp_path / "b", {"SHARED": "2"}, "--url=two")
        return first, second

    first, second = asyncio.run(closing(hosts, scenario()))
    assert first.exit_code == 0 and second.exit_code == 0
    assert "late" not in first._stdout_tail and "late" not in second._stdout_tail
    # a global timer is stopped at the hook's exit and the host is kept, an unref'd one is left
    # running (its writes go nowhere); one it cannot see (timers' own setInterval) retires the
    # host: the next hook gets a fresh one
    assert hosts.started == (2 if leave == "LEAVE_RAW_TIMER" else 1)


def test_a_late_error_of_an_earlier_hook_is_not_blamed_on_the_next(tmp_path):
    hook = make_hook(tmp_path, "title", PROBE)
    hosts = NodeHosts(tmp_path / "hosts")

    async def scenario():
        first = await run(hosts, hook, tmp_path / "a", {"SHARED": "1", "LATE_REJECTION": "1"}, "--url=one")
        second = await run(hosts, hook, tmp_path / "b", {"SHARED": "2"}, "--url=two")
        return first, second

    first, second = asyncio.run(closing(hosts, scenario()))
    assert first.exit_code == 0 and second.exit_code == 0
    assert [r["output_str"] for r in second.records] == ["--url=two"]
    assert b"late rejection" not in bytes(second._stderr)


def test_an_uncaught_error_fails_the_hook_with_its_stack_and_retires_the_host(tmp_path):
    hook = make_hook(tmp_path, "title", 'setTimeout(() => { throw new Error("boom in a callback"); }, 1);\n')
    hosts = NodeHosts(tmp_path / "hosts")
    proc = asyncio.run(closing(hosts, run(hosts, hook, tmp_path / "a", {})))
    assert proc.exit_code == 1
    assert b"Error: boom in a callback" in bytes(proc._stderr)
    assert hosts._idle.get((NODE, ""), []) == []  # not given to another hook


def test_a_hook_past_its_deadline_is_killed_with_its_host_and_the_next_gets_a_new_one(tmp_path):
    stuck = make_hook(tmp_path, "pdf", "setInterval(() => {}, 1000);\n")
    probe = make_hook(tmp_path, "title", PROBE)
    hosts = NodeHosts(tmp_path / "hosts")

    async def scenario():
        first = await run(hosts, stuck, tmp_path / "a", {}, timeout=1)
        second = await run(hosts, probe, tmp_path / "b", {"SHARED": "x"}, "--url=next")
        return first, second

    first, second = asyncio.run(closing(hosts, scenario()))
    assert first.timed_out and first.exit_code is not None and first.exit_code < 0
    assert second.exit_code == 0 and [r["output_str"] for r in second.records] == ["--url=next"]
    assert hosts.started == 2


def test_a_host_that_fails_to_start_leaves_hooks_cold_and_is_tried_again_after_retry_after(tmp_path):
    hook = make_hook(tmp_path, "title", PROBE)
    refuse, attempts = tmp_path / "refuse-hosts", tmp_path / "host-attempts"
    node = tmp_path / "node"  # the hooks' node, but a host it is asked to start exits at once while `refuse` exists
    node.write_text(
        f'#!/bin/sh\ncase "$*" in *node_host.js*) echo x >> {attempts}; [ -e {refuse} ] && exit 3;; esac\n'
        f'exec {NODE} "$@"\n'
    )
    node.chmod(0o755)
    refuse.touch()

    async def hooks(hosts: NodeHosts, *snaps: str) -> list[HookProcess]:
        out = []
        for snap in snaps:
            proc = HookProcess(
                hook, [str(node), hook.path, "--url=u"], tmp_path / snap / "title", {"PATH": "/usr/bin:/bin"}, 30,
                margin=0, kill_grace=0.5, spawner=hosts,
            )  # fmt: skip
            await proc.start()
            await proc.wait()
            out.append(proc)
            if snap == "unblock":
                refuse.unlink()
        return out

    waiting = NodeHosts(tmp_path / "hosts-a", retry_after=3600)
    procs = asyncio.run(closing(waiting, hooks(waiting, "a", "b")))
    assert [p.exit_code for p in procs] == [0, 0]  # both ran cold, as processes of their own
    assert [r["output_str"] for p in procs for r in p.records] == ["--url=u", "--url=u"]
    assert waiting.started == 0 and attempts.read_text().count("x") == 1  # the second did not try again

    retrying = NodeHosts(tmp_path / "hosts-b", retry_after=0)
    procs = asyncio.run(closing(retrying, hooks(retrying, "unblock", "c")))
    assert [p.exit_code for p in procs] == [0, 0]
    assert retrying.started == 1 and attempts.read_text().count("x") == 3  # failed once more, then started


#: Like abx-plugins' listeners (base/daemon_lifecycle.js): SIGTERM caught from the start, handed
#: to the shutdown handler, which reports what it saw and exits.
LISTENER = """
let seen = 0;
process.on("SIGTERM", () => {
  setTimeout(() => {
    console.log(JSON.stringify({ type: "ArchiveResult", status: "succeeded", output_str: `saw ${seen}` }));
    process.exit(0);
  }, 10);
});
console.log("listener attached");
setInterval(() => { seen += 1; }, 5);
"""


def background(hosts: NodeHosts, hook, plugin_dir: Path) -> HookProcess:
    """A background hook as the executor runs one (stopped with SIGTERM, 5 s to report)."""
    env = {"PATH": "/usr/bin:/bin"}
    return HookProcess(hook, [NODE, hook.path], plugin_dir, env, 30, margin=0, kill_grace=5, spawner=hosts)


def stopped_then_probe(tmp_path: Path, hook) -> tuple[HookProcess, HookProcess, NodeHosts]:
    """Start ``hook`` in a host, wait until it is ready, stop it; then run the probe hook."""
    probe = make_hook(tmp_path, "title", PROBE)
    hosts = NodeHosts(tmp_path / "hosts")

    async def scenario():
        proc = background(hosts, hook, tmp_path / "a" / hook.plugin)
        await proc.start()
        await proc.wait_ready()
        await proc.stop()
        after = await run(hosts, probe, tmp_path / "b", {"SHARED": "x"}, "--url=next")
        return proc, after

    proc, after = asyncio.run(closing(hosts, scenario()))
    return proc, after, hosts


def test_a_hosted_listener_gets_sigterm_reports_and_exits_and_its_host_serves_the_next_hook(tmp_path):
    listener = make_file_hook(tmp_path, "responses", "on_Snapshot__24_responses.daemon.bg.js", LISTENER)
    proc, after, hosts = stopped_then_probe(tmp_path, listener)
    assert proc.exit_code == 0 and not proc.timed_out
    assert proc._stdout_tail[0] == "listener attached"
    assert [r["output_str"].startswith("saw ") for r in proc.records] == [True]
    assert after.exit_code == 0 and [r["output_str"] for r in after.records] == ["--url=next"]
    assert hosts.started == 1  # the listener's interval was stopped, its SIGTERM handler removed


def test_a_hosted_hook_without_a_sigterm_handler_dies_of_it_with_its_host(tmp_path):
    sleeper = make_file_hook(
        tmp_path, "dns", "on_Snapshot__22_dns.daemon.bg.js", 'console.log("up");\nsetInterval(() => {}, 1000);\n'
    )
    proc, after, hosts = stopped_then_probe(tmp_path, sleeper)
    assert proc.exit_code == -15 and not proc.timed_out  # as a process's death by SIGTERM reads
    assert after.exit_code == 0 and hosts.started == 2


def test_a_pool_keeps_the_hosts_its_listeners_needed_at_once_then_reap_trims_the_spares(tmp_path, monkeypatch):
    listener = make_file_hook(tmp_path, "responses", "on_Snapshot__24_responses.daemon.bg.js", LISTENER)
    hosts = NodeHosts(tmp_path / "hosts")

    async def scenario():
        procs = [background(hosts, listener, tmp_path / f"s{i}" / "responses") for i in range(6)]
        for proc in procs:  # six tabs' listeners at once: six hosts
            await proc.start()
        await asyncio.gather(*(proc.wait_ready() for proc in procs))
        await asyncio.gather(*(proc.stop() for proc in procs))
        idle = list(hosts._idle[(NODE, "")])
        assert len(idle) == 6
        hosts.reap()  # just idle: all kept for the next snapshots
        kept_at_once = len(hosts._idle[(NODE, "")])
        monkeypatch.setattr(node_hosts, "SPARE_IDLE", 0.0)
        hosts.reap()  # idle past SPARE_IDLE: MAX_IDLE stay
        kept = list(hosts._idle[(NODE, "")])
        stopped = [host for host in idle if host not in kept]
        for host in stopped:
            await host.proc.wait()
        return procs, kept_at_once, kept, stopped

    procs, kept_at_once, kept, stopped = asyncio.run(closing(hosts, scenario()))
    assert [p.exit_code for p in procs] == [0] * 6 and hosts.started == 6
    assert kept_at_once == 6
    assert len(kept) == node_hosts.MAX_IDLE and len(stopped) == 6 - node_hosts.MAX_IDLE
    # the most recently idle are kept, oldest first (a checkout takes the last)
    assert [h.idle_since for h in kept] == sorted(h.idle_since for h in kept)
    assert min(h.idle_since for h in kept) >= max(h.idle_since for h in stopped)
    assert all(host.proc.returncode is not None for host in stopped)


def test_code_of_a_run_that_has_exited_changes_no_files(tmp_path):
    # as abx-plugins' redirects: process.exit inside a try whose catch writes a "failed" marker
    hook = make_file_hook(
        tmp_path,
        "redirects",
        "on_Snapshot__25_redirects.daemon.bg.js",
        """
        const fs = require("fs");
        async function main() {
          try {
            fs.writeFileSync("marker.json", "ok");
            process.exit(0);
          } catch (error) {
            fs.writeFileSync("marker.json", "failed: " + error.message);
            fs.writeFileSync("second.json", "x");
          }
        }
        main().catch(() => fs.writeFileSync("marker.json", "caught"));
        """,
    )
    hosts = NodeHosts(tmp_path / "hosts")
    proc = asyncio.run(closing(hosts, run(hosts, hook, tmp_path / "a", {})))
    assert proc.exit_code == 0
    assert (tmp_path / "a" / "redirects" / "marker.json").read_text() == "ok"
    assert not (tmp_path / "a" / "redirects" / "second.json").exists()


#: Reads its plugin's config through abx-plugins' own base/utils.js, as the browser hooks do (via
#: chrome_utils.js), and can change what it was handed.
CONFIG_PROBE = """
const fs = require("fs");
const { loadConfig } = require("../base/utils.js");
const config = loadConfig();
const seen = { value: config.PROBE_VALUE, list: config.PROBE_LIST };
for (const key of ["EXTRA_CONTEXT", "SNAP_DIR", "TMP_DIR"]) seen[key] = config[key];
fs.writeFileSync("out.json", JSON.stringify(seen));
if (process.argv.includes("--mutate")) config.PROBE_LIST.push("changed by the hook");
process.exit(0);
"""


def context(n: int) -> str:
    """An ``EXTRA_CONTEXT`` as the executor's (``hook_env``), for run ``n``."""
    return json.dumps({"snapshot_id": f"01SNAPSHOT{n:04d}", "plugin": "probe", "hook_name": "on_Snapshot__54_probe"})


def per_run(tmp_path: Path, n: int) -> dict[str, str]:
    """Run ``n``'s per-run keys as the executor sets them (``task.py``, ``hook_env``)."""
    return {"EXTRA_CONTEXT": context(n), "SNAP_DIR": str(tmp_path / f"s{n}"), "TMP_DIR": str(tmp_path / f"tmp{n}")}


def probe_schema(default: str, extra: dict | None = None) -> str:
    properties = {
        "PROBE_VALUE": {"type": "string", "default": default},
        "PROBE_LIST": {"type": "array", "default": ["a"]},
        **(extra or {}),
    }
    return json.dumps({"type": "object", "properties": properties})


def make_config_probe(tmp_path: Path, default: str, extra: dict | None = None):
    """The probe hook beside a copy of abx-plugins' base/utils.js and base/config.json, with its
    own schema (``probe_schema``); returns the hook and its schema's path."""
    base = Path(abx_plugins.__file__).parent / "plugins" / "base"
    (tmp_path / "plugins" / "base").mkdir(parents=True)
    for name in ("utils.js", "config.json"):
        shutil.copy(base / name, tmp_path / "plugins" / "base" / name)
    hook = make_hook(tmp_path, "probe", CONFIG_PROBE)
    schema = tmp_path / "plugins" / "probe" / "config.json"
    schema.write_text(probe_schema(default, extra))
    return hook, schema


def test_a_host_hands_the_config_abx_plugins_computed_to_the_next_run_in_the_same_environment(tmp_path):
    """base/utils.js's loadConfig is computed once per file and environment in a host, not once per
    run: the next run in the same environment but for its per-run keys is handed it, with those
    keys' settings its own; another environment, a schema changed even with its mtime kept, or a
    hook whose --url loadConfig would refuse computes it again; what a hook does to its copy stays
    its own."""
    hook, schema = make_config_probe(tmp_path, "from the schema")
    hosts = NodeHosts(tmp_path / "hosts")
    url = "--url=https://example.com/"

    async def scenario():
        seen = []
        for n, (env, args) in enumerate(
            [
                ({}, [url]),
                ({"TRACEPARENT": "00-x"}, [url]),
                ({}, [url, "--mutate"]),
                ({}, [url]),
                ({"OTHER": "x"}, [url]),
                ({}, [url]),  # after the schema was rewritten, its mtime kept
                ({}, ["--url=ftp://example.com/"]),
            ]
        ):
            if n == 5:
                before = schema.stat()
                schema.write_text(probe_schema("rewritten"))
                os.utime(schema, ns=(before.st_atime_ns, before.st_mtime_ns))
            handed = hosts.configs_handed
            snap = tmp_path / f"s{n}"
            proc = await run(hosts, hook, snap, {**env, **per_run(tmp_path, n)}, *args)
            out = snap / "probe" / "out.json"
            seen.append(
                (hosts.configs_handed - handed, proc.records, json.loads(out.read_text()) if out.exists() else None)
            )
        return seen

    seen = asyncio.run(closing(hosts, scenario()))
    assert hosts.started == 1
    assert [handed for handed, _, _ in seen] == [0, 1, 1, 1, 0, 0, 0]
    for n, (_, _, out) in enumerate(seen[:6]):
        assert out == {"value": "rewritten" if n == 5 else "from the schema", "list": ["a"], **per_run(tmp_path, n)}
    # loadConfig's own check of an unsupported --url runs as when the hook runs alone
    _, records, out = seen[6]
    assert out is None and [r["status"] for r in records] == ["noresults"]


@pytest.mark.parametrize(
    "extra, contexts, handed",
    [
        # per-run keys read otherwise than each by its own string property alone
        ({"PROBE_TRACE": {"type": "string", "default": "", "x-fallback": "TRACEPARENT"}}, [None, None], 0),
        ({"PROBE_TMP": {"type": "string", "default": "", "x-aliases": ["TMP_DIR"]}}, [None, None], 0),
        ({"SNAP_DIR": {"type": ["string", "null"], "default": None}}, [None, None], 0),
        # a per-run value another setting takes in
        ({"PROBE_DIR": {"type": "string", "default": "{SNAP_DIR}/probe"}}, [None, None], 0),
        # a per-run value loadConfig would fill in ("{NAME}"), in the first run or the second
        ({}, ["{PROBE_VALUE}", None], 0),
        ({}, [None, "{PROBE_VALUE}"], 0),
        # blank around it
        ({}, [None, " padded "], 0),
        # the control: all else the same, handed over
        ({}, [None, None], 1),
    ],
)
def test_a_config_read_from_a_per_run_key_otherwise_is_computed_for_every_run(tmp_path, extra, contexts, handed):
    hook, _ = make_config_probe(tmp_path, "first", extra)
    hosts = NodeHosts(tmp_path / "hosts")

    async def scenario():
        for n, ctx in enumerate(contexts):
            env = {"TRACEPARENT": "00-a", **per_run(tmp_path, n)}
            if ctx is not None:
                env["EXTRA_CONTEXT"] = ctx
            await run(hosts, hook, tmp_path / f"s{n}", env, "--url=https://example.com/")

    asyncio.run(closing(hosts, scenario()))
    assert hosts.started == 1
    assert hosts.configs_handed == handed
    for n in range(2):
        out = json.loads((tmp_path / f"s{n}" / "probe" / "out.json").read_text())
        assert out["SNAP_DIR"] == str(tmp_path / f"s{n}") and out["TMP_DIR"] == str(tmp_path / f"tmp{n}")


def test_a_host_keeps_at_most_64_configs_and_lets_the_least_recently_used_go_first(tmp_path):
    """The memo of a host is bounded (``CONFIG_MEMO_MAX`` in ``node_config_memo.js``): with 64
    environments kept, a 65th evicts the one handed over least recently, not the oldest kept."""
    hook, _ = make_config_probe(tmp_path, "bounded")
    hosts = NodeHosts(tmp_path / "hosts")
    order = [*range(64), 0, 64, 1, 0, 3]  # fill; use the first again; a 65th; the one it evicted; the first; another

    async def scenario():
        seen = []
        for n, environment in enumerate(order):
            handed = hosts.configs_handed
            env = {"OTHER": f"environment {environment}", **per_run(tmp_path, n)}
            await run(hosts, hook, tmp_path / f"s{n}", env, "--url=https://example.com/")
            seen.append(hosts.configs_handed - handed)
        return seen

    seen = asyncio.run(closing(hosts, scenario()))
    assert hosts.started == 1
    assert seen == [0] * 64 + [1, 0, 0, 1, 1]


def test_installing_the_config_memo_again_wraps_the_compiler_once(tmp_path):
    """``node_config_memo.js``'s ``install()`` may run more than once (the module loaded afresh
    too): base/utils.js still gets one statement, so its configCache is handed over once and the
    last install's ``activeRun`` is the one asked."""
    utils = tmp_path / "plugins" / "base" / "utils.js"
    utils.parent.mkdir(parents=True)
    utils.write_text('const configCache = new Map();\nfunction argvUrl() { return ""; }\n')
    memo = Path(node_hosts.__file__).with_name("node_config_memo.js")
    script = textwrap.dedent(
        f"""
        const asked = [];
        const memo = {json.dumps(str(memo))};
        const live = () => true;
        require(memo).install({{ activeRun: () => (asked.push("first"), null), isLive: live }});
        require(memo).install({{ activeRun: () => (asked.push("second"), null), isLive: live }});
        delete require.cache[require.resolve(memo)];  // as a host's fresh modules would
        require(memo).install({{ activeRun: () => (asked.push("third"), null), isLive: live }});
        require({json.dumps(str(utils))});
        process.stdout.write(JSON.stringify(asked));
        """
    )
    out = subprocess.run([NODE, "-e", script], capture_output=True, text=True, timeout=60, check=True)
    assert json.loads(out.stdout) == ["third"]
