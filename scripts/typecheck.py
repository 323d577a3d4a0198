"""``make typecheck``: mypy, strict, on ``libs/shared``, the crawl-runner's queries and
decisions and the webhook-sender's queries (the code every service trusts), the rest of the tree
as imports only.

Boxcar's packages live under ``libs/`` and ``services/`` and are mapped to ``boxcar.*`` by
``[tool.setuptools.package-dir]``; an editable install resolves them through an import hook mypy
cannot follow. So this script lays the same mapping out as symlinks under ``.venv/typecheck/``
(read from ``pyproject.toml``, the one home of the mapping) and points ``MYPYPATH`` there.
Exit status is mypy's.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
STRICT = [
    ("-p", "boxcar.shared"),
    ("-m", "boxcar.crawl_runner.queries"),
    ("-m", "boxcar.crawl_runner.decisions"),
    ("-m", "boxcar.webhook_sender.queries"),
]


def link_tree(target: Path) -> None:
    """``target/boxcar/<package>`` → its directory, for every mapped package."""
    mapping = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]
    shutil.rmtree(target, ignore_errors=True)
    for package, directory in mapping.items():
        link = target.joinpath(*package.split("."))
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(ROOT / directory, target_is_directory=True)


def main() -> int:
    tree = ROOT / ".venv" / "typecheck"
    link_tree(tree)
    modules = [part for flag, name in STRICT if _exists(tree, name) for part in (flag, name)]
    env = {**os.environ, "MYPYPATH": str(tree)}
    command = [sys.executable, "-m", "mypy", "--config-file", str(ROOT / "pyproject.toml"), *modules]
    return subprocess.run(command, env=env, cwd=tree).returncode


def _exists(tree: Path, module: str) -> bool:
    path = tree.joinpath(*module.split("."))
    return path.is_dir() or path.with_suffix(".py").exists()


if __name__ == "__main__":
    sys.exit(main())
