#!/usr/bin/env bash
# Make this machine able to run the sandbox tests: Debian's docker.io, bubblewrap and debootstrap, a
# Docker engine without a bridge network (sandboxes have no network; tests send traffic on loopback
# only), and the sandbox image, built offline once. Idempotent: every step is skipped when already done.
# Needs root. Environment: GYM_SANDBOX_IMAGE (default gym-sandbox:latest), DEBIAN_MIRROR (default
# http://deb.debian.org/debian), DOCKERD_LOG (default /var/log/gym-dockerd.log), PYTHON (default python3).
set -euo pipefail

IMAGE="${GYM_SANDBOX_IMAGE:-gym-sandbox:latest}"
MIRROR="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
DOCKERD_LOG="${DOCKERD_LOG:-/var/log/gym-dockerd.log}"
PYTHON="${PYTHON:-python3}"

log() { printf '[setup-sandbox] %s\n' "$*"; }

if [ "$(id -u)" != 0 ]; then
    log "must run as root (installs packages, starts dockerd, runs debootstrap)" >&2
    exit 1
fi

missing=()
command -v dockerd >/dev/null 2>&1 || missing+=(docker.io)
command -v bwrap >/dev/null 2>&1 || missing+=(bubblewrap)
command -v debootstrap >/dev/null 2>&1 || missing+=(debootstrap)
command -v setpriv >/dev/null 2>&1 || missing+=(util-linux)
if [ "${#missing[@]}" -gt 0 ]; then
    log "installing ${missing[*]}"
    apt-get update -q
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

engine_answers() { docker version --format '{{.Server.Version}}' >/dev/null 2>&1; }

if ! engine_answers; then
    log "starting dockerd (no bridge, no iptables), logging to $DOCKERD_LOG"
    nohup dockerd --bridge=none --iptables=false >>"$DOCKERD_LOG" 2>&1 &
    for _ in $(seq 1 60); do
        engine_answers && break
        sleep 0.5
    done
    if ! engine_answers; then
        log "dockerd did not answer within 30 s; last log lines:" >&2
        tail -n 20 "$DOCKERD_LOG" >&2 || true
        exit 1
    fi
fi
log "Docker engine $(docker version --format '{{.Server.Version}}') answers"

if docker image inspect "$IMAGE" >/dev/null 2>&1; then
    log "image $IMAGE present"
else
    log "building $IMAGE offline (debootstrap from $MIRROR, about a minute)"
    "$PYTHON" -m gym_server.cli.sandbox build-image --tag "$IMAGE" --mirror "$MIRROR" --if-missing
fi
