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
