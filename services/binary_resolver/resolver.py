"""The binary-resolver: answers ``binaries.resolve`` with abxpkg, installing only as a fallback.

For each request (one hydrated ``required_binaries`` record of a plugin) it first *loads* the
binary through the record's providers (the host's ``PATH`` via ``env``, or an earlier managed
install under ``ABXPKG_LIB_DIR``); only when that fails does it *install*, and then only through
the providers in ``BINARY_INSTALL_PROVIDERS`` (default uv, pip, npm, pnpm: managed installs into
``DATA_DIR/lib``; apt and brew change the host and are for image builds). Each answer is also
published as ``events.binary.resolved`` for the result-projector's Binary rows.

abx-plugins' own helpers (``load_required_binary``) build the abxpkg ``Binary``, so overrides,
``install_root`` templates and version pins mean here exactly what they mean to the hooks. An
install runs registry code (packages' install scripts), so it runs in a child process whose
environment holds none of Boxcar's secrets (``install_in_child``, ``secrets.public_environ``).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import msgspec

from boxcar.shared import bus, metrics, telemetry
from boxcar.shared.messages import BinaryRecord, BinaryReply, BinaryRequest, decode, encode
from boxcar.shared.secrets import public_environ
from boxcar.shared.settings import Settings

log = logging.getLogger("boxcar.binary_resolver")
tracer = telemetry.tracer("boxcar.binary_resolver")


def resolve_binary(request: BinaryRequest, lib_dir: Path, install_providers: list[str], machine: str) -> BinaryReply:
    """Load, or failing that install, one binary (blocking; run it in a thread).

    Returns:
        ``BinaryReply(ok=True, binary=...)`` or ``ok=False`` with a reason naming the binary and
        the providers tried.
    """
    from abx_plugins.plugins.base.utils import load_required_binary

    for provider, fields in (request.overrides or {}).items():
        root = (fields or {}).get("install_root") if isinstance(fields, dict) else None
        if root and not Path(root).resolve().is_relative_to(lib_dir.resolve()):
            return BinaryReply(
                ok=False,
                error=f"refusing to install {request.name} outside ABXPKG_LIB_DIR ({provider} install_root {root})",
            )
    record = {
        "name": request.name,
        "binproviders": request.binproviders,
        "min_version": request.min_version,
        "max_version": request.max_version,
        "overrides": request.overrides,
        "min_release_age": request.min_release_age,
        "postinstall_scripts": request.postinstall_scripts,
    }
    # Binaries installed earlier (node from npm, env projections) serve the installs that need them.
    path = os.pathsep.join(
        [str(lib_dir / "npm" / "node_modules" / ".bin"), str(lib_dir / "env" / "bin"), os.environ.get("PATH", "")]
    )
    environ = {**public_environ(), "ABXPKG_LIB_DIR": str(lib_dir), "PATH": path}
    config = {"ABXPKG_LIB_DIR": str(lib_dir)}
    load_error = ""
    try:
        binary = load_required_binary(record, config=config, environ=environ)
    except Exception as exc:  # abxpkg raises BinaryLoadError and friends
        binary, load_error = None, str(exc)
    if binary is None or not getattr(binary, "is_valid", False):
        listed = [p.strip() for p in request.binproviders.split(",") if p.strip()]
        allowed = [p for p in listed if p in install_providers]
        if not allowed:
            return BinaryReply(
                ok=False,
                error=(
                    f"{request.name} not found on this machine (looked via {', '.join(listed)}); "
                    f"installing it needs one of {', '.join(p for p in listed if p != 'env') or 'a host package'}, "
                    f"not allowed by BINARY_INSTALL_PROVIDERS={','.join(install_providers)}"
                    + (f" ({load_error[:300]})" if load_error else "")
                ),
            )
        log.info("installing %s via %s", request.name, ",".join(allowed))
        chosen = {**record, "binproviders": ",".join(allowed)}
        error = install_in_child(chosen, config, environ)
        try:
            binary = None if error else load_required_binary(chosen, config=config, environ=environ)
        except Exception as exc:
            error = str(exc)
        if error or binary is None or not getattr(binary, "is_valid", False):
            return BinaryReply(
                ok=False,
                error=f"installing {request.name} via {','.join(allowed)} failed: {error or 'not found after install'}"[
                    :2000
                ],
            )
        installed = True
    else:
        installed = False
    abspath = str(binary.loaded_abspath or binary.abspath)
    provider = binary.loaded_binprovider
    env_paths = {}
    if getattr(provider, "name", "") in ("pnpm", "npm") and getattr(provider, "install_root", None):
        env_paths["NODE_PATH"] = [str(Path(provider.install_root) / "node_modules")]  # node packages' modules
    return BinaryReply(
        ok=True,
        installed=installed,
        binary=BinaryRecord(
            name=request.name,
            abspath=abspath,
            version=str(binary.loaded_version or ""),
            sha256=str(binary.loaded_sha256 or ""),
            binprovider=getattr(provider, "name", ""),
            machine=machine,
            bin_dirs=[str(Path(abspath).parent)],
            env_paths=env_paths,
        ),
    )


def install_in_child(record: dict, config: dict, environ: dict[str, str], timeout: float = 1800) -> str:
    """Install one binary in a child process (``boxcar.binary_resolver.install``) whose environment
    is ``environ`` — the public environment: no secret of Boxcar's reaches an install script.

    Returns:
        "" on success, else why it failed (abxpkg's words, or the child's last output).
    """
    job = json.dumps({"record": record, "config": config}, default=str)
    try:
        done = subprocess.run(
            [sys.executable, "-m", "boxcar.binary_resolver.install"],
            input=job,
            capture_output=True,
            text=True,
            env=environ,
            timeout=timeout,
        )
    except subprocess.TimeoutExpired:
        return f"the install took longer than {timeout:.0f}s"
    for line in reversed(done.stdout.strip().splitlines()):
        try:
            answer = json.loads(line)
        except ValueError:
            continue
        if isinstance(answer, dict) and "ok" in answer:
            return "" if answer["ok"] else str(answer.get("error") or "failed")
    return f"the installer exited with {done.returncode}: {(done.stderr or done.stdout)[-1500:]}"


class BinaryResolver:
    """One resolver replica (queue group ``binary-resolver``: the replicas of one ``BINARIES_SITE``
    share its requests, ``bus.binary_resolve_subject``)."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._stop = asyncio.Event()
        self._locks: dict[str, asyncio.Lock] = {}
        self._jobs: set[asyncio.Task] = set()

    def stop(self) -> None:
        self._stop.set()

    async def run(self) -> None:
        nc, self.js = await bus.open_jetstream(self.settings, "binary-resolver")
        self.settings.lib_dir.mkdir(parents=True, exist_ok=True)
        subject = bus.binary_resolve_subject(self.settings.binaries_site)
        await nc.subscribe(subject, queue="binary-resolver", cb=self._on_request)
        log.info(
            "binary-resolver ready on %s (lib %s, installs via %s)",
            subject,
            self.settings.lib_dir,
            ",".join(self.settings.binary_install_providers),
        )
        await self._stop.wait()
        await nc.close()

    async def _on_request(self, msg) -> None:
        job = asyncio.create_task(self._answer(msg))  # installs must not block other requests
        self._jobs.add(job)
        job.add_done_callback(self._jobs.discard)

    async def _answer(self, msg) -> None:
        try:
            request = decode(msg.data, BinaryRequest)
        except (msgspec.ValidationError, msgspec.DecodeError) as exc:
            await msg.respond(encode(BinaryReply(ok=False, error=f"bad request: {exc}")))
            return
        with tracer.start_as_current_span(
            f"resolve {request.name}", context=telemetry.context_from(bus.headers_of(msg))
        ):
            lock = self._locks.setdefault(request.name, asyncio.Lock())
            async with lock:  # one install of a name at a time; later callers then just load it
                reply = await asyncio.to_thread(
                    resolve_binary,
                    request,
                    self.settings.lib_dir,
                    self.settings.binary_install_providers,
                    self.settings.machine_name,
                )
            metrics.BINARY_RESOLUTIONS.labels(
                "failed" if not reply.ok else "installed" if reply.installed else "loaded"
            ).inc()
            if reply.ok and reply.binary:
                b = reply.binary
                try:
                    await bus.publish(
                        self.js,
                        bus.SUBJECT_BINARY_RESOLVED,
                        b,
                        msg_id=f"binary.{b.machine}.{b.name}.{b.sha256 or b.abspath}",
                    )
                except Exception as exc:  # the answer matters more than the projection
                    log.warning("could not publish binary event for %s: %s", b.name, exc)
            else:
                log.warning("%s (for %s): %s", request.name, request.plugin, reply.error)
            await msg.respond(encode(reply))
