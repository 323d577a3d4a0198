"""Warm interpreters: a hook that starts a second Python (as trafilatura's does) gets a warm one
through the stand-in, with the same output, exit code and streams as a cold start."""

from __future__ import annotations

import asyncio
import os
import sys
import textwrap
from pathlib import Path

import pytest

from boxcar.hook_executor import warm
from boxcar.hook_executor.hooks import HookProcess
from boxcar.hook_executor.warm import WarmInterpreters
from boxcar.shared.plugins import get_catalog, parse_hook

WORKER = "import sys, json; print(json.dumps([sys.argv[1:], 'decimal' in sys.modules])); sys.exit(3)"


@pytest.fixture
def second_python(tmp_path, monkeypatch) -> Path:
    """A venv-like dir: its tool, and the ``python`` beside it (the interpreter the hook starts)."""
    venv = tmp_path / "venv" / "bin"
    venv.mkdir(parents=True)
    (venv / "python").symlink_to(sys.executable)
    (venv / "tool").write_text("#!/bin/sh\nexit 0\n")
    monkeypatch.setitem(warm.SECOND_INTERPRETERS, "TOOL_BINARY", ("decimal",))  # only the warm one has it
    return venv / "tool"


def hook_starting_a_second_python(tmp_path: Path):
    path = tmp_path / "plugins" / "probe" / "on_Snapshot__10_probe.py"
    path.parent.mkdir(parents=True)
    path.write_text(
        textwrap.dedent(
            f"""
            import os, subprocess, sys
            from pathlib import Path
            python = Path(os.environ["TOOL_BINARY"]).resolve().with_name("python")
            done = subprocess.run([str(python), "-c", {WORKER!r}, "a", "b c"], capture_output=True, text=True)
            print(done.stdout.strip(), done.returncode)
            """
        )
    )
    return parse_hook("probe", path)


def test_a_second_python_runs_warm_with_the_same_result(tmp_path, second_python):
    hook = hook_starting_a_second_python(tmp_path)

    async def run(env: dict[str, str]) -> str:
        proc = HookProcess(hook, [sys.executable, hook.path], tmp_path / "snap" / "probe", env, 30, margin=0)
        await proc.start()
        await proc.wait()
        return "\n".join(proc._stdout_tail)

    async def both() -> tuple[str, str]:
        interpreters = WarmInterpreters(tmp_path / "warm", get_catalog(), [])
        try:
            cold = await run({**os.environ, "TOOL_BINARY": str(second_python)})
            stand_ins = await interpreters.binary_overrides({"TOOL_BINARY": str(second_python)})
            assert set(stand_ins) == {"TOOL_BINARY"} and stand_ins["TOOL_BINARY"] != str(second_python)
            warm_out = await run({**os.environ, **stand_ins})
        finally:
            interpreters.stop()
        return cold, warm_out

    cold, warmed = asyncio.run(both())
    assert cold == '[["a", "b c"], false] 3'
    assert warmed == '[["a", "b c"], true] 3'  # same arguments and exit code, from the warm interpreter


def test_a_console_tool_runs_in_a_warmed_fork_with_its_arguments_and_exit_code(tmp_path, monkeypatch):
    """yt-dlp and gallery-dl (``WARM_TOOLS``): the stand-in binary runs the tool's main in a fork
    of its venv's interpreter after the warm-up ran there (once), with the same argv, streams and
    exit code as the real binary — also where the socket's path is too long to bind directly."""
    venv = tmp_path / "venv" / "bin"
    venv.mkdir(parents=True)
    (venv / "python").symlink_to(sys.executable)
    marker = tmp_path / "warmups"
    warmup = f"import builtins; builtins.WARMED = True; open({str(marker)!r}, 'a').write('x')"
    main = "import builtins, sys; print(sys.argv[1:], getattr(builtins, 'WARMED', False)); sys.exit(4)"
    (venv / "tool").write_text(f'#!/bin/sh\nexec {sys.executable} -c "{main}" "$@"\n')
    (venv / "tool").chmod(0o755)
    monkeypatch.setattr(warm, "WARM_TOOLS", {"TOOL_BINARY": ((), warmup, main)})

    async def run() -> list[tuple[str, int]]:
        # under a deep directory: its socket's path is longer than a Unix socket address may be
        interpreters = WarmInterpreters(tmp_path / ("deep" * 25) / "warm", get_catalog(), [])
        try:
            out = []
            for _ in range(2):
                stand_ins = await interpreters.binary_overrides({"TOOL_BINARY": str(venv / "tool")})
                proc = await asyncio.create_subprocess_exec(
                    stand_ins["TOOL_BINARY"], "--flag", "a b", stdout=asyncio.subprocess.PIPE
                )
                stdout, _ = await proc.communicate()
                out.append((stdout.decode().strip(), proc.returncode))
            return out
        finally:
            interpreters.stop()

    import subprocess

    real = subprocess.run([str(venv / "tool"), "--flag", "a b"], capture_output=True, text=True)
    assert (real.stdout.strip(), real.returncode) == ("['--flag', 'a b'] False", 4)
    assert asyncio.run(run()) == [("['--flag', 'a b'] True", 4)] * 2
    assert marker.read_text() == "x"  # warmed once, forked twice
