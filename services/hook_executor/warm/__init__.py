"""Warm hooks (``WARM_HOOKS``): what makes a hook start cheaply, apart from the code that runs
hooks.

- ``interpreters``: ``WarmInterpreters``, the executor's set of warm Python interpreters (the
  hooks' own, a second one such as trafilatura's, yt-dlp's and gallery-dl's) and the compile
  cache for Node hooks;
- ``zygote_server``: the fork server itself, run by path in the hooks' Python (standard library
  only);
- ``zygote_client``: the executor's side, ``Zygote`` and ``WarmProcess``;
- ``zygote_wire``: the protocol between them (also a stand-in interpreter, ``--client``);
- ``nodebundle``: the one esbuild bundle of puppeteer-core the browser hooks load;
- ``node_hosts`` (and ``node_host.js``): long-lived Node processes that run the browser's
  foreground hooks one after another, puppeteer-core loaded once (``node_config_memo.js``: the
  hosts hand abx-plugins' computed config from run to run);
- ``common``: what both share (a pipe's stream reader, the retry of a starter that failed).
"""

from boxcar.hook_executor.warm.interpreters import SECOND_INTERPRETERS, WarmInterpreters, node_compile_cache

__all__ = ["SECOND_INTERPRETERS", "WarmInterpreters", "node_compile_cache"]
