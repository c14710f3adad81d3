#!/usr/bin/env bash
# Run the peers' interop tests (tests/interop/README.md): `run.sh [PEER...]`, every peer when none is named.
# For each peer: build (or reuse) its venv under var/interop/<peer> from its pinned requirements.txt, with
# the interpreter its `python-version` file names (a pyenv version; the default python3 without one),
# install the gym extras its `gym-extras` file names into the project's environment ($PYTHON), then run
# its tests from its venv with its own pytest.ini; the gym servers they start run from $PYTHON. `-P` keeps
# the repository root off sys.path: its `verifiers/` (the gym's verifiers) would shadow the verifiers peer.
set -euo pipefail
cd "$(dirname "$0")/../.."
PYTHON=${PYTHON:-python3}
LOCK=requirements/lock.txt

peers=("$@")
if [ ${#peers[@]} -eq 0 ]; then
    for dir in tests/interop/*/; do [ -f "$dir/requirements.txt" ] && peers+=("$(basename "$dir")"); done
fi
[ ${#peers[@]} -gt 0 ] || { echo "no interop peers under tests/interop"; exit 1; }

status=0
for peer in "${peers[@]}"; do
    dir=tests/interop/$peer
    [ -f "$dir/requirements.txt" ] || { echo "unknown peer '$peer': no $dir/requirements.txt"; exit 2; }
    venv=var/interop/$peer
    # requirements-nodeps.txt (optional): packages installed without their dependencies, for a peer whose
    # declared pins cannot install here (OpenRLHF's CUDA builds); the stamp covers both files.
    if ! cat "$dir"/requirements*.txt | cmp -s - "$venv/requirements.txt"; then
        echo "== $peer: building $venv"
        rm -rf "$venv"
        if [ -f "$dir/python-version" ]; then
            # pyenv's own lookup, not `python` on PATH: inside an activated venv that is the venv's python,
            # whatever PYENV_VERSION says.
            version=$(tr -d '[:space:]' < "$dir/python-version")
            interpreter=$(PYENV_VERSION=$version pyenv which python 2>/dev/null || true)
            if [ -z "$interpreter" ]; then
                echo "$peer needs Python $version: install it with pyenv (pyenv install $version)"
                exit 2
            fi
            "$interpreter" -m venv "$venv"
        else
            "$PYTHON" -m venv "$venv"
        fi
        "$venv/bin/python" -m pip install -q -r "$dir/requirements.txt"
        if [ -f "$dir/requirements-nodeps.txt" ]; then
            "$venv/bin/python" -m pip install -q --no-deps -r "$dir/requirements-nodeps.txt"
        fi
        cat "$dir"/requirements*.txt > "$venv/requirements.txt"  # the stamp: rebuilt when the pins change
    fi
    extras=$( { tr -d '[:space:]' < "$dir/gym-extras"; } 2>/dev/null || true)  # no file: no extras
    "$PYTHON" -m pip install -q -c "$LOCK" -e ".${extras:+[$extras]}"
    echo "== $peer: tests"
    GYM_INTEROP_PYTHON=$(command -v "$PYTHON") "$venv/bin/python" -P -m pytest -c "$dir/pytest.ini" "$dir" || status=1
done
exit $status
