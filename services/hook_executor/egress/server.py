"""``python -m boxcar.hook_executor.egress.server ARGS``: proxy.py's command line (``python -m
proxy ARGS``), without the ``proxy`` package's ``__init__``.

That ``__init__`` imports proxy.py's unit-testing helpers and, through them, every bundled plugin
and httpx: 185 modules and ~8 MiB per proxy process (the acceptor is a fork, so twice) that the
proxy never uses. Here ``proxy`` is registered as a bare package (its ``__path__`` only) before
``proxy.proxy`` is imported; the rest of proxy.py imports its own submodules by name. A proxy.py
release that needs its package root would fail at start, loudly: ``EgressProxy.start`` raises with
the log's last lines.
"""

from __future__ import annotations

import importlib.util
import sys
import types


def bare_package(name: str) -> None:
    """Put ``name`` into ``sys.modules`` as a package whose ``__init__`` never ran (submodules
    import from its directory as usual).

    Raises:
        ModuleNotFoundError: ``name`` is not an installed package.
    """
    spec = importlib.util.find_spec(name)
    if spec is None or spec.submodule_search_locations is None:
        raise ModuleNotFoundError(f"{name} is not an installed package")
    module = types.ModuleType(name)
    module.__path__ = list(spec.submodule_search_locations)
    module.__spec__ = spec
    module.__file__ = spec.origin
    sys.modules[name] = module


def main() -> None:
    from boxcar.shared.procutil import limit_malloc_arenas

    limit_malloc_arenas()  # a thread per connection (``--threaded``); the acceptor is a fork and inherits it
    bare_package("proxy")
    bare_package("proxy.plugin")  # its __init__ imports every bundled plugin (httpx among them)
    # proxy.py's flags are declared by the modules that use them; these declare the ones its
    # start-up reads (the web server's, the PAC file's, the cache directory), as the package
    # roots' imports would
    import proxy.http.server  # noqa: F401
    import proxy.plugin.cache.store.disk  # noqa: F401
    from proxy.proxy import entry_point

    entry_point()


if __name__ == "__main__":
    main()
