"""``python -m boxcar.binary_resolver.install``: one abxpkg install, in a process of its own
whose environment holds none of Boxcar's secrets.

An install runs code from the registries (npm and pip run packages' install scripts; abxpkg
builds its subprocesses' environment from ``os.environ``), so it must not run in a process that
holds ``DATABASE_URL`` or ``SECRET_KEY``: the resolver starts this module with
``secrets.public_environ()`` and reads one JSON object from stdin, ``{"record", "config"}`` as
``load_required_binary`` takes them. It prints ``{"ok": true}`` or ``{"ok": false, "error"}``;
the resolver then loads what was installed, in its own process, as it loads any binary.
"""

from __future__ import annotations

import json
import sys


def main() -> None:
    from abx_plugins.plugins.base.utils import load_required_binary

    job = json.loads(sys.stdin.read())
    try:
        binary = load_required_binary(job["record"], config=job["config"], install=True)
        ok = binary is not None and bool(getattr(binary, "is_valid", False))
        print(json.dumps({"ok": ok, "error": "" if ok else "the install gave no usable binary"}))
    except Exception as exc:  # abxpkg raises BinaryInstallError and friends: the reply says why
        print(json.dumps({"ok": False, "error": f"{type(exc).__name__}: {exc}"[:4000]}))


if __name__ == "__main__":
    main()
