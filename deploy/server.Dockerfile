# The gym server image: multi-stage, no compilers or build tools in the final stage, runs as a non-root
# user. Build from the repository root:
#   docker build -f deploy/server.Dockerfile -t gym-server:latest .                     (pulls python:3.11-slim)
#   docker build -f deploy/server.Dockerfile --build-arg BASE_IMAGE=gym-base:bookworm .  (offline base)
# BASE_IMAGE is any Debian-like image with python3 >= 3.11 and its venv module (python:3.11-slim, or
# gym-base:bookworm from deploy/base/build.sh). Both stages use it, so the virtual environment built in
# the first runs unchanged in the second.
#
# Dependencies: when deploy/wheelhouse/ holds wheels (deploy/wheelhouse.sh fills it with the host's pip),
# the build installs from there alone (pip --no-index) and needs no network; when it is empty, pip
# downloads from the package index, which needs a build network (the default bridge, or --network host).
ARG BASE_IMAGE=python:3.11-slim

FROM ${BASE_IMAGE} AS builder
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1 PIP_ROOT_USER_ACTION=ignore PYTHONDONTWRITEBYTECODE=1
WORKDIR /src
# 1. Dependencies (a layer that changes only with pyproject.toml or the wheelhouse): wheels of every
#    requirement and of the build backend, then an install into the venv from those wheels alone.
COPY deploy/wheelhouse/ /wheelhouse/
COPY pyproject.toml ./
ARG EXTRAS=sandbox
RUN set -eu; \
    python3 -c 'import sys; assert sys.version_info >= (3, 11), "BASE_IMAGE needs python3 >= 3.11: " + sys.version'; \
    python3 -c 'import sys, tomllib; \
project = tomllib.load(open("pyproject.toml", "rb")); \
deps = list(project["project"]["dependencies"]) + list(project["build-system"]["requires"]); \
extras = [e for e in sys.argv[1].split(",") if e]; \
deps += [d for e in extras for d in project["project"]["optional-dependencies"][e]]; \
print("\n".join(deps))' "${EXTRAS}" >/tmp/requirements.txt; \
    if ls /wheelhouse/*.whl >/dev/null 2>&1; then \
        echo "dependencies from the wheelhouse only (no index)"; set -- --no-index --find-links /wheelhouse; \
    else \
        echo "empty wheelhouse: dependencies from the package index"; set --; \
    fi; \
    python3 -m venv /opt/venv; \
    /opt/venv/bin/pip wheel --quiet "$@" --wheel-dir /wheels -r /tmp/requirements.txt; \
    /opt/venv/bin/pip install --quiet --no-index --find-links /wheels -r /tmp/requirements.txt
# 2. The project: one package folder (environments, verifiers, trainer adapters and datasets included).
COPY README.md ./
COPY gym_server/ gym_server/
RUN set -eu; \
    /opt/venv/bin/pip wheel --quiet --no-deps --no-build-isolation --no-index --wheel-dir /wheels .; \
    /opt/venv/bin/pip install --quiet --no-deps --no-index /wheels/gym_server-*.whl; \
    /opt/venv/bin/pip check; \
    /opt/venv/bin/pip uninstall --quiet --yes pip setuptools wheel; \
    /opt/venv/bin/gym-server --help >/dev/null
LABEL gym-server.image=server-builder

FROM ${BASE_IMAGE}
ARG BASE_IMAGE
ARG GYM_UID=10001
RUN useradd --system --uid "${GYM_UID}" --user-group --create-home --home-dir /home/gym \
        --shell /usr/sbin/nologin gym
COPY --from=builder /opt/venv /opt/venv
COPY deploy/healthcheck.py /usr/local/bin/gym-healthcheck
# GYM_HOST=0.0.0.0: in a container the server must bind beyond loopback (the image's equivalent of
# `gym-server serve --host 0.0.0.0`, still overridable by the environment).
ENV PATH=/opt/venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    LANG=C.UTF-8 \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    GYM_HOST=0.0.0.0 \
    GYM_PORT=8000
WORKDIR /home/gym
USER gym
EXPOSE 8000
LABEL org.opencontainers.image.title="gym-server" gym-server.image=server gym-server.base-image="${BASE_IMAGE}"
HEALTHCHECK --interval=5s --timeout=5s --start-period=30s --retries=3 CMD ["gym-healthcheck"]
ENTRYPOINT ["gym-server"]
CMD ["serve"]
