#!/usr/bin/env bash
# The full-stack test CI runs: on a machine with no container registry, build the images offline, bring
# the compose stack up (compose.yaml + compose.test.yaml: host networking, loopback ports), wait for
# health, play one `counter` episode through the HTTP API, find its trajectory in the stack's Postgres,
# check that the server container can run a sandbox, take everything down with `down -v`, and prove that
# no container, network or volume of the stack (and no sandbox of its server) is left.
#
# Every wait has a deadline; each failure (engine unreachable, port in use, missing image, Postgres not
# ready, server not healthy, wrong episode) prints a clear message, the stack's state and logs, cleans
# up, and exits non-zero.
#
# Usage: .ci/stack-test.sh                 the test (root; installs/starts what it needs, see STACK_SETUP)
#        .ci/stack-test.sh --failure-modes runs the bad-input cases and checks each fails fast and clearly
# Environment (all optional):
#   STACK_SETUP=1            0: install and start nothing; fail when the engine or compose is missing
#   STACK_BUILD=1            0: build no image; use what the engine has (a missing one fails). With 1, the
#                            server image is rebuilt only when its inputs changed (its gym-server.inputs label)
#   STACK_PROJECT=gymstack   compose project name (labels, volume names)
#   STACK_SERVER_PORT=18080  STACK_PG_PORT=15432   loopback ports of the server and of Postgres
#   STACK_PG_DEADLINE_S=90   STACK_SERVER_DEADLINE_S=120   STACK_COMPOSE_DEADLINE_S=180   waits
#   STACK_EXTRA_COMPOSE=FILE a further override file (the failure-mode cases use it)
#   STACK_KEEP=1             leave the stack running after a failure, for debugging
#   BASE_IMAGE=gym-base:bookworm  POSTGRES_IMAGE=gym-postgres:bookworm  GYM_SERVER_IMAGE=gym-server:latest
#   GYM_SANDBOX__IMAGE=gym-sandbox:latest
set -euo pipefail
cd "$(dirname "$0")/.."

PROJECT="${STACK_PROJECT:-gymstack}"
SERVER_PORT="${STACK_SERVER_PORT:-18080}"
PG_PORT="${STACK_PG_PORT:-15432}"
PG_DEADLINE="${STACK_PG_DEADLINE_S:-90}"
SERVER_DEADLINE="${STACK_SERVER_DEADLINE_S:-120}"
COMPOSE_DEADLINE="${STACK_COMPOSE_DEADLINE_S:-180}"
SETUP="${STACK_SETUP:-1}"
BUILD="${STACK_BUILD:-1}"
SERVER_NAME="gym-stack-test"
export BASE_IMAGE="${BASE_IMAGE:-gym-base:bookworm}"
export POSTGRES_IMAGE="${POSTGRES_IMAGE:-gym-postgres:bookworm}"
export GYM_SERVER_IMAGE="${GYM_SERVER_IMAGE:-gym-server:latest}"
export GYM_SANDBOX__IMAGE="${GYM_SANDBOX__IMAGE:-gym-sandbox:latest}"
export GYM_SERVER_NAME="$SERVER_NAME" STACK_SERVER_PORT="$SERVER_PORT" STACK_PG_PORT="$PG_PORT"
export COMPOSE_PROJECT_NAME="$PROJECT"
# The stack database's credentials, fixed for the test (the psql check below uses them).
export POSTGRES_USER=gym POSTGRES_PASSWORD=gym POSTGRES_DB=gym

STARTED=$SECONDS
PASSED=0  # checks passed so far; the closing line counts them
log() { printf '[stack %4ds] %s\n' "$((SECONDS - STARTED))" "$*"; }
pass() {
    PASSED=$((PASSED + 1))
    log "$*"
}
die() {
    printf '[stack %4ds] FAILED: %s\n' "$((SECONDS - STARTED))" "$*" >&2
    printf 'stack-test: %d passed, 1 failed\n' "$PASSED" >&2
    exit 1
}

# ---------------------------------------------------------------------------------------------------
# --failure-modes: each bad input must end in a non-zero exit with its message, within a bounded time.
# ---------------------------------------------------------------------------------------------------
if [ "${1:-}" = --failure-modes ]; then
    scratch="$(mktemp -d)"
    listener_pid=""
    trap 'rm -rf "$scratch"; [ -z "$listener_pid" ] || kill "$listener_pid" 2>/dev/null || true' EXIT
    ok=0
    bad=0
    # expect NAME PATTERN LIMIT_S VAR=VALUE...: run this script with the variables, expect failure + PATTERN.
    expect() {
        local name="$1" pattern="$2" limit="$3" start=$SECONDS code=0
        shift 3
        env STACK_SETUP=0 STACK_BUILD=0 "$@" timeout -k 10 "$limit" bash "$0" >"$scratch/out" 2>&1 || code=$?
        local took=$((SECONDS - start))
        if [ "$code" != 0 ] && [ "$code" != 124 ] && [ "$code" != 137 ] && grep -qE "$pattern" "$scratch/out"; then
            ok=$((ok + 1))
            log "failure mode '$name': exit $code after ${took}s: $(grep -m1 -E 'FAILED' "$scratch/out" | sed 's/^\[stack *[0-9]*s\] //')"
        else
            bad=$((bad + 1))
            log "failure mode '$name' did NOT behave (exit $code after ${took}s, wanted /$pattern/); output:"
            tail -n 30 "$scratch/out" | sed 's/^/    /'
        fi
    }
    expect "engine unreachable" "Docker engine does not answer" 60 DOCKER_HOST=unix:///nonexistent/docker.sock
    expect "missing image" "missing image gym-server:no-such-tag" 60 GYM_SERVER_IMAGE=gym-server:no-such-tag
    # A listener of our own on the server's loopback port.
    python3 -c 'import socket, sys, time
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", int(sys.argv[1]))); s.listen(); time.sleep(300)' "$SERVER_PORT" &
    listener_pid=$!
    sleep 0.5
    expect "port in use" "port $SERVER_PORT on 127.0.0.1 is in use" 60
    kill "$listener_pid" 2>/dev/null || true
    wait "$listener_pid" 2>/dev/null || true
    listener_pid=""
    # Postgres that starts but never answers: its deadline must fire (and clean up).
    printf 'services:\n  postgres:\n    entrypoint: ["sh", "-c", "exec sleep 600"]\n' >"$scratch/pg-hang.yaml"
    expect "Postgres never ready" "Postgres did not become ready within 8 s" 120 \
        STACK_PG_DEADLINE_S=8 STACK_EXTRA_COMPOSE="$scratch/pg-hang.yaml"
    # Postgres that exits at once (uninitialised volume, no password): reported without waiting it out.
    printf 'services:\n  postgres:\n    environment:\n      POSTGRES_PASSWORD: ""\n' >"$scratch/pg-exit.yaml"
    expect "Postgres exits" "Postgres exited before it was ready" 120 STACK_EXTRA_COMPOSE="$scratch/pg-exit.yaml"
    # A failed run cleans up after itself as well.
    left="$(docker ps -aq --filter "label=com.docker.compose.project=$PROJECT"; \
        docker volume ls -q --filter "label=com.docker.compose.project=$PROJECT"; \
        docker network ls -q --filter "label=com.docker.compose.project=$PROJECT")"
    if [ -n "$left" ]; then
        bad=$((bad + 1))
        log "the failed runs left containers, volumes or networks of '$PROJECT' behind: $(echo "$left" | tr '\n' ' ')"
    else
        ok=$((ok + 1))
        log "nothing of '$PROJECT' left after the failed runs"
    fi
    log "failure modes: $ok behaved, $bad did not"
    printf 'stack-failure-modes: %d passed, %d failed\n' "$ok" "$bad"
    [ "$bad" = 0 ]
    exit
fi

# ---------------------------------------------------------------------------------------------------
# The engine, the compose CLI, the images.
# ---------------------------------------------------------------------------------------------------
engine_answers() { timeout 20 docker version --format '{{.Server.Version}}' >/dev/null 2>&1; }

if [ "$SETUP" = 1 ]; then
    [ "$(id -u)" = 0 ] || die "must run as root (installs packages, starts dockerd, runs debootstrap); or STACK_SETUP=0"
    if [ -f .ci/setup-sandbox.sh ]; then
        # docker.io, bubblewrap, debootstrap; dockerd --bridge=none --iptables=false; the sandbox image.
        bash .ci/setup-sandbox.sh
    else
        if ! command -v dockerd >/dev/null || ! command -v debootstrap >/dev/null; then
            apt-get update -q
            DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends docker.io debootstrap
        fi
        if ! engine_answers; then
            log "starting dockerd (no bridge, no iptables)"
            nohup dockerd --bridge=none --iptables=false >>/var/log/gym-dockerd.log 2>&1 &
            for _ in $(seq 1 60); do engine_answers && break; sleep 0.5; done
        fi
    fi
fi
engine_answers || die "the Docker engine does not answer (docker version, DOCKER_HOST=${DOCKER_HOST:-unix:///var/run/docker.sock}); start dockerd, or run with STACK_SETUP=1 as root"
pass "Docker engine $(docker version --format '{{.Server.Version}}') answers"

if timeout 20 docker compose version >/dev/null 2>&1; then
    COMPOSE=(docker compose)
elif command -v docker-compose >/dev/null 2>&1; then
    COMPOSE=(docker-compose)
elif [ "$SETUP" = 1 ]; then
    log "installing Debian's docker-compose (no compose plugin here)"
    apt-get update -q
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends docker-compose
    COMPOSE=(docker-compose)
else
    die "no compose CLI: neither 'docker compose' nor 'docker-compose' (apt-get install docker-compose)"
fi
log "compose CLI: ${COMPOSE[*]} ($("${COMPOSE[@]}" version --short 2>/dev/null || echo '?'))"

# The server uses the host's socket from inside its container; it needs the socket's group.
DOCKER_GID="$(stat -c %g /var/run/docker.sock 2>/dev/null || echo 0)"
export DOCKER_GID

# The stack's configuration: compose.yaml + compose.test.yaml (+ STACK_EXTRA_COMPOSE), merged by the
# compose CLI itself, minus the published `ports` of services on host networking. Compose v2 and the
# engine discard those anyway; Debian's docker-compose 1.29 refuses to create such a container, and a
# later compose file cannot remove list entries an earlier one set (v2's `!reset` is not in v1).
SCRATCH="$(mktemp -d)"
trap 'rm -rf "$SCRATCH"' EXIT
SOURCES=(-f compose.yaml -f compose.test.yaml)
[ -z "${STACK_EXTRA_COMPOSE:-}" ] || SOURCES+=(-f "$STACK_EXTRA_COMPOSE")
"${COMPOSE[@]}" "${SOURCES[@]}" -p "$PROJECT" config >"$SCRATCH/merged.yaml" 2>"$SCRATCH/config.err" \
    || die "compose cannot read ${SOURCES[*]}: $(tail -n 5 "$SCRATCH/config.err")"
YAML_PYTHON=python3
python3 -c 'import yaml' 2>/dev/null || YAML_PYTHON=/usr/bin/python3 # Debian's, which compose v1 uses
"$YAML_PYTHON" - "$SCRATCH/merged.yaml" "$SCRATCH/stack.yaml" <<'EOF' || die "cannot render the stack's compose file"
import sys

import yaml

config = yaml.safe_load(open(sys.argv[1]))
config.pop("version", None)
services = config.get("services", {})
for name in [name for name, service in services.items() if service.get("profiles")]:
    del services[name]  # the test runs the default profile only; compose v1 would still create their
    # network and volumes
for service in services.values():
    if service.get("network_mode") == "host":
        service.pop("ports", None)
used = {str(mount).split(":")[0] for service in services.values() for mount in service.get("volumes", [])}
config["volumes"] = {name: spec for name, spec in (config.get("volumes") or {}).items() if name in used}
with open(sys.argv[2], "w") as out:
    yaml.safe_dump(config, out, sort_keys=False)
EOF
FILES=(-f "$SCRATCH/stack.yaml")
DC=("${COMPOSE[@]}" "${FILES[@]}" -p "$PROJECT")  # the compose command line of this stack

# image_inputs: a hash of what the server image is built from: the files of the build context (the paths
# .dockerignore lets in; tracked files by their git blob, changed and untracked ones by content), the
# Dockerfile, the build arguments and the base image's id. Empty (so: always build) outside a git checkout.
image_inputs() {
    local paths=()
    mapfile -t paths < <(sed -n 's|^!\(.*\)|\1|p' .dockerignore)
    git rev-parse --git-dir >/dev/null 2>&1 || return 0
    {
        git ls-files -s -- "${paths[@]}" deploy/server.Dockerfile
        git status --porcelain --untracked-files=all -- "${paths[@]}" deploy/server.Dockerfile
        git ls-files -z -m -o --exclude-standard -- "${paths[@]}" deploy/server.Dockerfile \
            | xargs -0r sha256sum 2>/dev/null
        find deploy/wheelhouse -maxdepth 1 -name '*.whl' -printf '%f %s\n' | sort
        echo "$BASE_IMAGE $(docker image inspect -f '{{.Id}}' "$BASE_IMAGE" 2>/dev/null)"
    } | sha256sum | cut -c1-16
}

if [ "$BUILD" = 1 ]; then
    t=$SECONDS
    bash deploy/base/build.sh all
    bash deploy/wheelhouse.sh
    # The server image carries the hash of its inputs (the build context .dockerignore lets in, the
    # Dockerfile, the base image): the same inputs as the image the engine holds mean no build at all.
    inputs="$(image_inputs)"
    if [ -n "$inputs" ] && [ "$(docker image inspect -f '{{index .Config.Labels "gym-server.inputs"}}' \
        "$GYM_SERVER_IMAGE" 2>/dev/null)" = "$inputs" ]; then
        log "$GYM_SERVER_IMAGE is up to date (inputs $inputs); not rebuilt"
    else
        log "building $GYM_SERVER_IMAGE from $BASE_IMAGE (no network in the build)"
        # The builder stage is tagged too, so that pruning the images this build replaced keeps its cache.
        for target in builder final; do
            tag="$GYM_SERVER_IMAGE" target_args=()
            [ "$target" = final ] || { tag="${GYM_SERVER_IMAGE%%:*}-builder:latest"; target_args=(--target builder); }
            if ! docker build --network none "${target_args[@]}" -f deploy/server.Dockerfile \
                --build-arg "BASE_IMAGE=$BASE_IMAGE" --label "gym-server.inputs=$inputs" -t "$tag" . \
                >"$SCRATCH/build.log" 2>&1; then
                tail -n 30 "$SCRATCH/build.log" >&2
                die "building $tag failed (docker build -f deploy/server.Dockerfile --build-arg BASE_IMAGE=$BASE_IMAGE .)"
            fi
        done
        for kind in server server-builder; do
            docker image prune -f --filter "label=gym-server.image=$kind" >/dev/null 2>&1 || true
        done
    fi
    log "images ready in $((SECONDS - t)) s"
fi

for image in "$GYM_SERVER_IMAGE" "$POSTGRES_IMAGE" "$GYM_SANDBOX__IMAGE"; do
    docker image inspect "$image" >/dev/null 2>&1 \
        || die "missing image $image (build the images: .ci/stack-test.sh with STACK_BUILD=1, deploy/base/build.sh, gym-server sandbox build-image)"
done
pass "images present: $GYM_SERVER_IMAGE, $POSTGRES_IMAGE, $GYM_SANDBOX__IMAGE"

# ---------------------------------------------------------------------------------------------------
# Clean start, clean finish.
# ---------------------------------------------------------------------------------------------------
leftovers() {
    local label="label=com.docker.compose.project=$PROJECT"
    {
        docker ps -aq --filter "$label" | sed 's/^/container /'
        docker ps -aq --filter "label=gym-server.server=$SERVER_NAME" | sed 's/^/sandbox container /'
        # `python -m gym_server.cli.sandbox status` labels its probe sandbox with this server name.
        docker ps -aq --filter "label=gym-server.server=gym-status" | sed 's/^/sandbox-probe container /'
        docker network ls -q --filter "$label" | sed 's/^/network /'
        docker volume ls -q --filter "$label" | sed 's/^/volume /'
        docker volume ls -q --filter "name=^${PROJECT}_" | sed 's/^/volume /'
    } | sort -u
}

down() {
    timeout -k 10 90 "${DC[@]}" down -v --remove-orphans --timeout 20 >/dev/null 2>&1 || true
    # Sandboxes of this server, should a crash have left any (the server removes its own on stop).
    docker ps -aq --filter "label=gym-server.server=$SERVER_NAME" | xargs -r docker rm -f >/dev/null 2>&1 || true
}

port_free() {
    python3 - "$1" <<'EOF'
import socket
import sys

s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
try:
    s.bind(("127.0.0.1", int(sys.argv[1])))
except OSError:
    sys.exit(1)
EOF
}

stack_up=0
on_exit() {
    local code=$?
    if [ "$stack_up" = 1 ] && [ "$code" != 0 ]; then
        echo "---- stack state at failure ----" >&2
        timeout 30 "${DC[@]}" ps >&2 2>&1 || true
        for service in postgres sandbox-image gym-server; do
            echo "---- last log lines of $service ----" >&2
            timeout 30 "${DC[@]}" logs --no-color --tail 25 "$service" >&2 2>&1 || true
        done
        if [ "${STACK_KEEP:-0}" = 1 ]; then
            echo "STACK_KEEP=1: the stack is left running (${COMPOSE[*]} ${FILES[*]} -p $PROJECT down -v)" >&2
            exit "$code"
        fi
        down
        local left
        left="$(leftovers)"
        [ -z "$left" ] || echo "after clean-up, still left: $left" >&2
    fi
    rm -rf "$SCRATCH"
    exit "$code"
}
trap on_exit EXIT

left="$(leftovers)"
if [ -n "$left" ]; then
    log "removing what an earlier run left: $(echo "$left" | tr '\n' ' ')"
    down
fi
for port in "$SERVER_PORT" "$PG_PORT"; do
    port_free "$port" || die "port $port on 127.0.0.1 is in use ($(ss -Hltnp "sport = :$port" 2>/dev/null | awk '{print $NF}' | head -1)); free it or set STACK_SERVER_PORT / STACK_PG_PORT"
done

# container_state SERVICE: "status health exitcode" of the service's container, or "absent" (asked of the
# engine by label, so stopped containers count whichever compose CLI runs).
container_state() {
    local id
    id="$(docker ps -aq --filter "label=com.docker.compose.project=$PROJECT" \
        --filter "label=com.docker.compose.service=$1" | head -1)"
    [ -n "$id" ] || { echo absent; return; }
    docker inspect -f '{{.State.Status}} {{if .State.Health}}{{.State.Health.Status}}{{else}}none{{end}} {{.State.ExitCode}}' "$id" 2>/dev/null || echo absent
}

# wait_healthy SERVICE LABEL DEADLINE_S: until the container's health check passes; fails at once when
# the container exits or turns unhealthy, and at the deadline otherwise.
wait_healthy() {
    local service="$1" label="$2" deadline=$((SECONDS + $3)) state
    while :; do
        state="$(container_state "$service")"
        case "$state" in
            "running healthy "*) return 0 ;;
            exited* | dead*) die "$label exited before it was ready (state: $state); its log follows" ;;
            "running unhealthy"*) die "$label turned unhealthy (state: $state); its log follows" ;;
        esac
        [ "$SECONDS" -lt "$deadline" ] || die "$label did not become ready within $3 s (state: $state)"
        sleep 1
    done
}

# ---------------------------------------------------------------------------------------------------
# Up.
# ---------------------------------------------------------------------------------------------------
t_up=$SECONDS
stack_up=1
log "starting postgres ($POSTGRES_IMAGE) on 127.0.0.1:$PG_PORT"
timeout -k 10 "$COMPOSE_DEADLINE" "${DC[@]}" up -d --no-build postgres \
    || die "compose could not start postgres (exit $?)"
wait_healthy postgres Postgres "$PG_DEADLINE"
pass "postgres healthy after $((SECONDS - t_up)) s"

log "starting the stack (sandbox-image check, gym-server on 127.0.0.1:$SERVER_PORT)"
timeout -k 10 "$COMPOSE_DEADLINE" "${DC[@]}" up -d --no-build \
    || die "compose up failed or took more than $COMPOSE_DEADLINE s (exit $?)"
wait_healthy gym-server "the gym server" "$SERVER_DEADLINE"
pass "gym-server healthy after $((SECONDS - t_up)) s"

# ---------------------------------------------------------------------------------------------------
# One episode through the API (README's curl walk-through), loopback only.
# ---------------------------------------------------------------------------------------------------
t_episode=$SECONDS
SESSION_ID="$(python3 - "http://127.0.0.1:$SERVER_PORT" <<'EOF'
import json
import re
import sys
import time
import urllib.error
import urllib.request

base = sys.argv[1]


def call(method, path, body=None, expect=(200,)):
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(base + path, data=data, method=method)
    request.add_header("content-type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=30) as reply:
            status, text = reply.status, reply.read().decode()
    except urllib.error.HTTPError as exc:
        status, text = exc.code, exc.read().decode()
    if status not in expect:
        sys.exit(f"{method} {path}: HTTP {status}, wanted {expect}: {text[:500]}")
    return json.loads(text) if text else None


def step(session, *calls):
    tool_calls = [
        {"id": f"c{i}", "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}
        for i, (name, args) in enumerate(calls)
    ]
    return call("POST", f"/v1/sessions/{session}/step",
                {"message": {"role": "assistant", "tool_calls": tool_calls}})


tasks = call("GET", "/v1/environments/counter/tasks?limit=1")["tasks"]
task = tasks[0]
target = int(re.search(r"-?\d+", task["prompt"]).group())
created = call("POST", "/v1/sessions",
               {"env": "counter", "task_id": task["id"], "seed": 0, "run": "stack-test"}, expect=(201,))
sid = created["session_id"]
value = int(step(sid, ("read", {}))["messages"][0]["content"])
result = step(sid, ("add", {"amount": target - value}), ("submit", {}))
if not result["done"] or result["reward"] != 1.0:
    sys.exit(f"the episode did not end with reward 1.0: {result}")
verified = call("POST", f"/v1/sessions/{sid}/verify")
if verified["reward"] != 1.0 or verified.get("failure"):
    sys.exit(f"verify: {verified}")
for _ in range(2):  # close is idempotent
    call("DELETE", f"/v1/sessions/{sid}", expect=(204,))
deadline = time.monotonic() + 30
while True:  # the writer flushes in batches; the stored row shows up within a flush interval
    stored = call("GET", f"/v1/rollouts/{sid}", expect=(200, 404))
    if stored and stored.get("status") == "completed":
        break
    if time.monotonic() > deadline:
        sys.exit(f"the trajectory of {sid} was not stored as completed within 30 s: {stored}")
    time.sleep(0.2)
print(f"episode {task['id']}: counter {value} -> {target}, reward 1.0, "
      f"{len(stored['messages'])} messages stored", file=sys.stderr)
print(sid)
EOF
)" || die "the episode through the API failed (see above)"
pass "episode played in $((SECONDS - t_episode)) s (session $SESSION_ID)"

# The row, read from the stack's own Postgres (not the host's on 5432).
row="$(timeout 60 "${DC[@]}" exec -T postgres \
    psql -U gym -d gym -tAc \
    "SELECT env, task_id, run, status, reward, server_name FROM trajectories WHERE id = '$SESSION_ID'" 2>&1)" \
    || die "psql in the postgres container failed: $row"
case "$row" in
    "counter|counter-"*"|stack-test|completed|1|$SERVER_NAME") pass "trajectory row in the stack's Postgres: $row" ;;
    *) die "unexpected trajectory row for $SESSION_ID in the stack's Postgres: '$row'" ;;
esac

# Sandboxes from inside the server container: the Docker backend through the mounted socket.
code=0
timeout 120 "${DC[@]}" exec -T gym-server python -m gym_server.cli.sandbox status --json \
    >"$SCRATCH/sandbox.json" 2>&1 || code=$?
verdict="$(python3 - "$SCRATCH/sandbox.json" 2>&1 <<'EOF'
import json
import sys

text = open(sys.argv[1]).read()
try:
    docker = json.loads(text[text.index("{"):])["backends"]["docker"]
except (ValueError, KeyError) as exc:
    sys.exit(f"unreadable report ({exc}): {text[-1500:]}")
if not docker.get("ok"):
    sys.exit(f"the Docker backend cannot run code from inside the server container: {docker}")
print(f"python {docker.get('python')} ran in a sandbox container, exec {docker.get('exec_ms')} ms")
EOF
)" || die "sandbox status in the server container (exit $code): $verdict"
pass "sandbox from inside the server container: $verdict"

# ---------------------------------------------------------------------------------------------------
# Down, and nothing left.
# ---------------------------------------------------------------------------------------------------
t_down=$SECONDS
timeout -k 10 120 "${DC[@]}" down -v --remove-orphans --timeout 20 \
    || die "compose down failed or took more than 120 s"
stack_up=0
left="$(leftovers)"
[ -z "$left" ] || die "left behind after down -v: $(echo "$left" | tr '\n' ' ')"
for port in "$SERVER_PORT" "$PG_PORT"; do
    port_free "$port" || die "port $port is still taken after down -v"
done
pass "down -v in $((SECONDS - t_down)) s; no container, network, volume or sandbox of '$PROJECT' left, ports free"
log "stack test passed in $((SECONDS - STARTED)) s"
printf 'stack-test: %d passed, 0 failed\n' "$PASSED"
