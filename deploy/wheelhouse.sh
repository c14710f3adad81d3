#!/usr/bin/env bash
# Fill deploy/wheelhouse/ with binary wheels of the server's dependencies (and the build backend), for the
# image's interpreter (CPython 3.11 on glibc Linux, this machine's architecture), using this host's pip and
# its configuration: index, mirrors, certificates and caches. The server image's build stage then installs
# from the wheelhouse alone (pip --no-index), so `docker build` needs no network at all: this is what makes
# the image buildable with an engine that has no bridge network and no registry.
#
# Skipped when the wheelhouse already matches pyproject.toml's dependencies (a stamp file), or copied from
# the machine's cache ($GYM_CI_CACHE/wheelhouse/<stamp>, default ~/.cache/gym-server) when a fresh checkout
# has none; --force redoes it. An empty wheelhouse (just the .gitignore) makes the image build download from the index instead.
#
# Usage: deploy/wheelhouse.sh [--force]     Environment: PYTHON (default python3), EXTRAS (default sandbox)
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON="${PYTHON:-python3}"
EXTRAS="${EXTRAS:-sandbox}"
TARGET_PYTHON=3.11
OUT=deploy/wheelhouse
log() { printf '[wheelhouse] %s\n' "$*"; }

# The requirement list: the project's dependencies plus its EXTRAS, and the build backend.
requirements="$("$PYTHON" - "$EXTRAS" <<'PY'
import sys
import tomllib

project = tomllib.load(open("pyproject.toml", "rb"))
build = project["build-system"]["requires"]
deps = list(project["project"]["dependencies"])
for extra in filter(None, sys.argv[1].split(",")):
    deps += project["project"].get("optional-dependencies", {})[extra]
print("\n".join(sorted(set(deps)) + sorted(build)))
PY
)"
arch="$(uname -m)"
stamp="$(printf '%s\n%s %s\n' "$requirements" "$TARGET_PYTHON" "$arch" | sha256sum | cut -c1-16)"

if [ "${1:-}" != --force ] && [ -f "$OUT/.stamp" ] && [ "$(cat "$OUT/.stamp")" = "$stamp" ]; then
    log "up to date ($(find "$OUT" -name '*.whl' | wc -l) wheels, stamp $stamp)"
    exit 0
fi
# A copy per stamp outside the checkout, so a fresh clone on the same machine (CI) downloads nothing.
CACHE="${GYM_CI_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gym-server}/wheelhouse/$stamp"
if [ "${1:-}" != --force ] && [ -f "$CACHE/.stamp" ] && [ "$(cat "$CACHE/.stamp")" = "$stamp" ]; then
    find "$OUT" -name '*.whl' -delete
    cp "$CACHE"/*.whl "$OUT"/ && cp "$CACHE/.stamp" "$OUT/.stamp"
    log "copied from $CACHE ($(find "$OUT" -name '*.whl' | wc -l) wheels, stamp $stamp)"
    exit 0
fi

# Every manylinux tag a bookworm (glibc 2.36) image accepts, newest first, plus pure-Python wheels.
platforms=()
for minor in $(seq 36 -1 17); do platforms+=(--platform "manylinux_2_${minor}_${arch}"); done
platforms+=(--platform "manylinux2014_${arch}")
if [ "$arch" = x86_64 ]; then
    for minor in 12 5; do platforms+=(--platform "manylinux_2_${minor}_${arch}"); done
    platforms+=(--platform "manylinux2010_${arch}" --platform "manylinux1_${arch}")
fi

find "$OUT" -name '*.whl' -delete
rm -f "$OUT/.stamp"
log "downloading wheels for CPython $TARGET_PYTHON ($arch) into $OUT"
printf '%s\n' "$requirements" >"$OUT/.requirements.txt"
pip_log="$(mktemp)"
if ! "$PYTHON" -m pip download --quiet --dest "$OUT" --only-binary=:all: \
    --python-version "$TARGET_PYTHON" --implementation cp "${platforms[@]}" \
    -r "$OUT/.requirements.txt" >"$pip_log" 2>&1; then
    grep -v "is ignored: it is neither a file nor a directory" "$pip_log" | tail -n 30 >&2
    rm -f "$pip_log"
    log "pip download failed (a dependency with no wheel for CPython $TARGET_PYTHON/$arch?)" >&2
    exit 1
fi
rm -f "$pip_log"
rm -f "$OUT/.requirements.txt"
printf '%s\n' "$stamp" >"$OUT/.stamp"
log "$(find "$OUT" -name '*.whl' | wc -l) wheels, $(du -sh "$OUT" | cut -f1)"
# Kept for the next checkout (no cache when the home is read-only: then the next one downloads again).
if mkdir -p "$CACHE.tmp.$$" 2>/dev/null && cp "$OUT"/*.whl "$OUT/.stamp" "$CACHE.tmp.$$"/; then
    rm -rf "$CACHE" && mv "$CACHE.tmp.$$" "$CACHE"
    find "$(dirname "$CACHE")" -mindepth 1 -maxdepth 1 -type d -mtime +14 -exec rm -rf {} +  # old stamps
else
    rm -rf "$CACHE.tmp.$$"
fi
