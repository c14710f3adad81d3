#!/bin/sh
# Official-image-like start: initialise an empty PGDATA (superuser POSTGRES_USER with POSTGRES_PASSWORD,
# database POSTGRES_DB, password auth over TCP), then exec postgres. Runs as the postgres user.
set -eu

if [ "${1#-}" != "$1" ]; then
    set -- postgres "$@"
fi

if [ "$1" = postgres ] && [ ! -s "$PGDATA/PG_VERSION" ]; then
    : "${POSTGRES_USER:=postgres}"
    : "${POSTGRES_DB:=$POSTGRES_USER}"
    auth="${POSTGRES_HOST_AUTH_METHOD:-scram-sha-256}"
    if [ -z "${POSTGRES_PASSWORD:-}" ] && [ "$auth" != trust ]; then
        echo "error: the database is uninitialized and POSTGRES_PASSWORD is not set" \
            "(or set POSTGRES_HOST_AUTH_METHOD=trust, which allows any connection without a password)" >&2
        exit 1
    fi
    mkdir -p "$PGDATA"
    chmod 0700 "$PGDATA"
    pwfile="$(mktemp)"
    printf '%s\n' "${POSTGRES_PASSWORD:-}" >"$pwfile"
    # shellcheck disable=SC2086  # POSTGRES_INITDB_ARGS is a list of words, as in the official image
    initdb --username="$POSTGRES_USER" --pwfile="$pwfile" --auth-local=trust --auth-host="$auth" \
        --encoding=UTF8 --locale=C.UTF-8 ${POSTGRES_INITDB_ARGS:-} -D "$PGDATA" >/dev/null
    rm -f "$pwfile"
    printf "listen_addresses = '*'\n" >>"$PGDATA/postgresql.conf"
    printf 'host all all all %s\n' "$auth" >>"$PGDATA/pg_hba.conf"
    if [ "$POSTGRES_DB" != postgres ]; then
        # Single-user mode: no server, no socket, nothing answers before the database exists.
        printf 'CREATE DATABASE "%s";\n' "$POSTGRES_DB" | postgres --single -j -D "$PGDATA" postgres >/dev/null
    fi
    echo "initialised $PGDATA (user $POSTGRES_USER, database $POSTGRES_DB)"
fi

exec "$@"
