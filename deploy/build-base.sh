#!/bin/sh
# A minimal Debian image with Python, built from Debian's packages alone (no image registry):
#   debootstrap --variant=minbase --include=python3,python3-venv SUITE DIR MIRROR
#   tar -C DIR -c . | <engine> import - IMAGE
# It is the BASE_IMAGE of deploy/Dockerfile and of the local Postgres and NATS images
# (deploy/compose.local.yml). Needs root and debootstrap. Usage:
#   deploy/build-base.sh [IMAGE]        default localhost/boxcar-base:trixie
# Environment: ENGINE (podman|docker, default: podman if present), DEBIAN_SUITE (trixie),
# DEBIAN_MIRROR (default: the first mirror apt uses here, else http://deb.debian.org/debian).
set -eu

IMAGE=${1:-localhost/boxcar-base:trixie}
SUITE=${DEBIAN_SUITE:-trixie}
ENGINE=${ENGINE:-$(command -v podman >/dev/null 2>&1 && echo podman || echo docker)}

if [ -z "${DEBIAN_MIRROR:-}" ]; then
  DEBIAN_MIRROR=$(cat /etc/apt/sources.list.d/*.sources 2>/dev/null | sed -n 's/^URIs:[[:space:]]*\([^[:space:]]*\/debian\)\/*$/\1/p' | head -n1)
  [ -n "$DEBIAN_MIRROR" ] || DEBIAN_MIRROR=$(cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null \
    | sed -n 's/^deb[[:space:]]\{1,\}\(\[[^]]*\][[:space:]]\{1,\}\)\{0,1\}\([^[:space:]]*\/debian\)\/*[[:space:]].*/\2/p' | head -n1)
  [ -n "$DEBIAN_MIRROR" ] || DEBIAN_MIRROR=http://deb.debian.org/debian
fi

command -v debootstrap >/dev/null 2>&1 || { echo "error: debootstrap is missing (apt-get install debootstrap)" >&2; exit 1; }
[ "$(id -u)" = 0 ] || { echo "error: debootstrap needs root" >&2; exit 1; }

ROOT=$(mktemp -d "${TMPDIR:-/tmp}/boxcar-base.XXXXXX")
trap 'rm -rf "$ROOT"' EXIT INT TERM
echo "debootstrap $SUITE from $DEBIAN_MIRROR (minbase + python3)"
debootstrap --variant=minbase --include=python3,python3-venv "$SUITE" "$ROOT" "$DEBIAN_MIRROR" >"$ROOT.log" 2>&1 \
  || { tail -n 30 "$ROOT.log" >&2; rm -f "$ROOT.log"; exit 1; }
rm -f "$ROOT.log"

# Lean: no package lists, downloaded .debs, docs, man pages or translations; later apt-get
# installs in images built on this one leave them out too (as Debian's slim images do).
cat >"$ROOT/etc/dpkg/dpkg.cfg.d/boxcar-slim" <<'EOF'
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/man/*
path-exclude /usr/share/info/*
path-exclude /usr/share/locale/*
path-include /usr/share/locale/locale.alias
path-exclude /usr/share/lintian/*
EOF
cat >"$ROOT/etc/apt/apt.conf.d/boxcar-slim" <<'EOF'
APT::Install-Recommends "false";
APT::Install-Suggests "false";
DPkg::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/*.bin || true"; };
Dir::Cache::pkgcache ""; Dir::Cache::srcpkgcache "";
EOF
find "$ROOT/usr/share/doc" -mindepth 1 ! -name copyright ! -type d -delete 2>/dev/null || true
find "$ROOT/usr/share/doc" -mindepth 1 -type d -empty -delete 2>/dev/null || true
rm -rf "$ROOT"/usr/share/man/* "$ROOT"/usr/share/info/* "$ROOT"/var/cache/apt/* "$ROOT"/var/lib/apt/lists/* \
  "$ROOT"/var/log/*.log "$ROOT"/var/log/apt/* "$ROOT"/tmp/* "$ROOT"/var/tmp/*
find "$ROOT/usr/share/locale" -mindepth 1 -maxdepth 1 ! -name locale.alias -exec rm -rf {} + 2>/dev/null || true
find "$ROOT/usr/lib" -name __pycache__ -type d -prune -exec rm -rf {} +

tar --numeric-owner -C "$ROOT" -c . | "$ENGINE" import \
  --change 'ENV LANG=C.UTF-8' --change 'CMD ["/bin/bash"]' - "$IMAGE" >/dev/null
echo "built $IMAGE ($("$ENGINE" image inspect --format '{{.Size}}' "$IMAGE" | awk '{printf "%.0f MB", $1/1e6}'))"
