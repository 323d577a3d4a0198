"""BinaryEnv: the one rule for what a hook's environment gets from its resolved binaries
(``BinaryEnv.of`` for a plugin's binaries in order, ``layered`` for envs in precedence order,
``apply`` onto an environment)."""

from __future__ import annotations

import os

from boxcar.hook_executor.binaries import BinaryEnv
from boxcar.shared.messages import BinaryRecord


def test_binaries_merged_in_order_keep_the_first_ones_directories_first_and_each_once():
    node = BinaryRecord(
        name="node",
        abspath="/lib/npm/bin/node",
        bin_dirs=["/lib/npm/bin", "/lib/npm/bin"],
        env_paths={"NODE_PATH": ["/lib/npm/node_modules"], "EMPTY": []},
    )
    chrome = BinaryRecord(name="chromium", abspath="/usr/bin/chromium", bin_dirs=["/usr/bin", "/lib/npm/bin"])
    assert BinaryEnv.of([("NODE_BINARY", node)]) == BinaryEnv(
        {"NODE_BINARY": "/lib/npm/bin/node"}, {"PATH": ["/lib/npm/bin"], "NODE_PATH": ["/lib/npm/node_modules"]}
    )
    assert BinaryEnv.of([(None, chrome)]) == BinaryEnv({}, {"PATH": ["/usr/bin", "/lib/npm/bin"]})  # no key

    env = BinaryEnv.of([("NODE_BINARY", node), ("CHROME_BINARY", chrome)])
    assert env.values == {"NODE_BINARY": "/lib/npm/bin/node", "CHROME_BINARY": "/usr/bin/chromium"}
    assert env.paths == {"PATH": ["/lib/npm/bin", "/usr/bin"], "NODE_PATH": ["/lib/npm/node_modules"]}

    applied = env.apply({"PATH": "/bin", "HOME": "/root"})
    assert applied["PATH"] == os.pathsep.join(["/lib/npm/bin", "/usr/bin", "/bin"])
    assert applied["NODE_PATH"] == "/lib/npm/node_modules" and applied["HOME"] == "/root"
    assert applied["CHROME_BINARY"] == "/usr/bin/chromium"


def test_layered_envs_keep_the_first_ones_values_and_directories_in_front():
    """One precedence rule for every env: a plugin's own binaries before the plugins it requires,
    the shadow ``node_modules`` before a hook's ``NODE_PATH``."""
    own = BinaryEnv({"NODE_BINARY": "/own/node"}, {"PATH": ["/own/bin"], "NODE_PATH": ["/own/lib"]})
    required = BinaryEnv(
        {"NODE_BINARY": "/chrome/node", "CHROME_BINARY": "/usr/bin/chromium"},
        {"PATH": ["/chrome/bin", "/own/bin"], "NODE_PATH": []},
    )
    env = BinaryEnv.layered([own, required])
    assert env.values == {"NODE_BINARY": "/own/node", "CHROME_BINARY": "/usr/bin/chromium"}
    assert env.paths == {"PATH": ["/own/bin", "/chrome/bin"], "NODE_PATH": ["/own/lib"]}
    assert BinaryEnv.layered([]) == BinaryEnv()
    shadowed = BinaryEnv.layered([BinaryEnv({}, {"NODE_PATH": ["/shadow"]}), env])
    assert shadowed.paths["NODE_PATH"] == ["/shadow", "/own/lib"] and shadowed.values == env.values
