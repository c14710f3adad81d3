#!/usr/bin/env bash
# Build the stack's base images offline, with no container registry: only a Debian mirror is needed.
#
#   gym-base:bookworm      Debian bookworm minbase + python3 (3.11), python3-venv, ca-certificates.
#                          The server image is built FROM it (BASE_IMAGE=gym-base:bookworm).
#   gym-postgres:bookworm  Debian bookworm minbase + postgresql-15, with an entrypoint that behaves like
#                          the official `postgres` image (POSTGRES_USER/PASSWORD/DB, PGDATA, PGPORT,
#                          initdb on first start, runs as the postgres user). Used as POSTGRES_IMAGE.
#
# The rootfs comes from the sandbox image builder's code path (gym_server.sandbox.images.build_rootfs:
# debootstrap --variant=minbase, then trimmed), is tarred and `docker import`ed. An image that exists is
# kept (pass --force to rebuild). Needs root (debootstrap), a Docker engine, and the gym_server package
# importable by $PYTHON (pip install -e . first).
#
# Usage: deploy/base/build.sh [--force] [base|postgres|all]      (default: all)
# Environment: DEBIAN_MIRROR (default http://deb.debian.org/debian), PYTHON (default python3),
#              GYM_BASE_IMAGE (default gym-base:bookworm), GYM_POSTGRES_IMAGE (default gym-postgres:bookworm)
set -euo pipefail
cd "$(dirname "$0")/../.."

MIRROR="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
PYTHON="${PYTHON:-python3}"
BASE_TAG="${GYM_BASE_IMAGE:-gym-base:bookworm}"
POSTGRES_TAG="${GYM_POSTGRES_IMAGE:-gym-postgres:bookworm}"
FORCE=0
WHAT=all
for arg in "$@"; do
    case "$arg" in
        --force) FORCE=1 ;;
        base | postgres | all) WHAT="$arg" ;;
        -h | --help) sed -n '2,18p' "$0"; exit 0 ;;
        *) echo "[base] unknown argument: $arg (see --help)" >&2; exit 2 ;;
    esac
done

log() { printf '[base] %s\n' "$*"; }
die() { printf '[base] ERROR: %s\n' "$*" >&2; exit 1; }

[ "$(id -u)" = 0 ] || die "must run as root (debootstrap)"
command -v debootstrap >/dev/null 2>&1 || [ -x /usr/sbin/debootstrap ] \
    || die "debootstrap is not installed (apt-get install debootstrap, or run .ci/setup-sandbox.sh)"
timeout 20 docker version --format '{{.Server.Version}}' >/dev/null 2>&1 \
    || die "the Docker engine does not answer (docker version failed); start dockerd first"
"$PYTHON" -c 'import gym_server.sandbox.images' 2>/dev/null \
    || die "cannot import gym_server.sandbox.images with $PYTHON; install the package first (pip install -e .)"

have_image() { docker image inspect "$1" >/dev/null 2>&1; }

# rootfs DIR PACKAGE...: debootstrap + trim through the sandbox builder's code path.
rootfs() {
    local target="$1"
    shift
    "$PYTHON" - "$target" "$MIRROR" "$@" <<'EOF'
import sys
from pathlib import Path

from gym_server.sandbox.images import build_rootfs

target, mirror, *packages = sys.argv[1:]
build_rootfs(Path(target), mirror=mirror, packages=packages)
EOF
}

# import_rootfs DIR TAG CHANGE...: tar with numeric owners, then `docker import` of that file (a
# failed tar must never leave an empty image behind), then a smoke run that removes a broken image.
import_rootfs() {
    local root="$1" tag="$2"
    shift 2
    local changes=()
    for change in "$@"; do changes+=(--change "$change"); done
    tar --numeric-owner -C "$root" -cf "$root.tar" .
    docker import "${changes[@]}" "$root.tar" "$tag" >/dev/null
    rm -f "$root.tar"
}

# smoke TAG CMD...: run CMD in a throwaway container of TAG; on failure remove TAG and stop.
smoke() {
    local tag="$1"
    shift
    if ! timeout 60 docker run --rm --network none --entrypoint "$1" "$tag" "${@:2}" >/dev/null; then
        docker image rm "$tag" >/dev/null 2>&1 || true
        die "the new image $tag failed its smoke test ($*); removed it"
    fi
}

SCRATCH="$(mktemp -d /var/tmp/gym-base.XXXXXX)"
trap 'rm -rf "$SCRATCH"' EXIT

build_base() {
    if [ "$FORCE" = 0 ] && have_image "$BASE_TAG"; then
        log "image $BASE_TAG present (--force rebuilds it)"
        return
    fi
    local started=$SECONDS
    log "building $BASE_TAG: debootstrap bookworm minbase + python3, python3-venv from $MIRROR"
    rootfs "$SCRATCH/base" python3 python3-venv ca-certificates
    import_rootfs "$SCRATCH/base" "$BASE_TAG" \
        'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8' \
        'CMD ["python3"]' \
        'LABEL gym-server.image=base'
    rm -rf "$SCRATCH/base"
    smoke "$BASE_TAG" python3 -c 'import ensurepip, ssl, sqlite3, venv; assert __import__("sys").version_info >= (3, 11)'
    log "built $BASE_TAG ($(docker image inspect -f '{{.Size}}' "$BASE_TAG" | awk '{printf "%.0f MB", $1/1e6}'), $((SECONDS - started)) s)"
}

build_postgres() {
    if [ "$FORCE" = 0 ] && have_image "$POSTGRES_TAG"; then
        log "image $POSTGRES_TAG present (--force rebuilds it)"
        return
    fi
    local started=$SECONDS rootfs_tag="${POSTGRES_TAG%%:*}-rootfs:${POSTGRES_TAG#*:}"
    log "building $POSTGRES_TAG: debootstrap bookworm minbase + postgresql-15 from $MIRROR"
    rootfs "$SCRATCH/postgres" postgresql-15 postgresql-client-15
    # The package's post-install made a "main" cluster and its config; the entrypoint makes its own.
    rm -rf "$SCRATCH/postgres/var/lib/postgresql/15" "$SCRATCH/postgres/etc/postgresql/15"
    import_rootfs "$SCRATCH/postgres" "$rootfs_tag" 'LABEL gym-server.image=postgres-rootfs'
    rm -rf "$SCRATCH/postgres"
    # The entrypoint, user, volume and health tooling: a plain Dockerfile on top (no network needed).
    docker build -q --network none --build-arg "BASE_IMAGE=$rootfs_tag" -t "$POSTGRES_TAG" \
        -f deploy/postgres/Dockerfile deploy/postgres >/dev/null
    docker image rm "$rootfs_tag" >/dev/null 2>&1 || true
    smoke "$POSTGRES_TAG" postgres --version
    log "built $POSTGRES_TAG ($(docker image inspect -f '{{.Size}}' "$POSTGRES_TAG" | awk '{printf "%.0f MB", $1/1e6}'), $((SECONDS - started)) s)"
}

case "$WHAT" in
    base) build_base ;;
    postgres) build_postgres ;;
    all) build_base; build_postgres ;;
esac
