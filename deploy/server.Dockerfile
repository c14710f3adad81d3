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
# 1. Dependencies (a layer that changes only with the pyproject files or the wheelhouse): wheels of every
#    third-party requirement of the service, the trainer side and the verifier library (the built-in
#    environments add none: deploy/image_requirements.py) and of the build backend, then an install into the
#    venv from those wheels alone.
COPY deploy/wheelhouse/ /wheelhouse/
COPY deploy/image_requirements.py pyproject.toml ./
COPY trainer_adapters/pyproject.toml trainer_adapters/
COPY verifiers/pyproject.toml verifiers/
COPY datasets/pyproject.toml datasets/
ARG EXTRAS=sandbox
RUN set -eu; \
    python3 -c 'import sys; assert sys.version_info >= (3, 11), "BASE_IMAGE needs python3 >= 3.11: " + sys.version'; \
    python3 image_requirements.py "${EXTRAS}" >/tmp/requirements.txt; \
    if ls /wheelhouse/*.whl >/dev/null 2>&1; then \
        echo "dependencies from the wheelhouse only (no index)"; set -- --no-index --find-links /wheelhouse; \
    else \
        echo "empty wheelhouse: dependencies from the package index"; set --; \
    fi; \
    python3 -m venv /opt/venv; \
    /opt/venv/bin/pip wheel --quiet "$@" --wheel-dir /wheels -r /tmp/requirements.txt; \
    /opt/venv/bin/pip install --quiet --no-index --find-links /wheels -r /tmp/requirements.txt
# 2. The workspace's distributions: the service, the trainer side, the verifier library, the task files
#    and each built-in environment, as wheels (their tests stay out).
COPY README.md ./
COPY gym_server/ gym_server/
COPY trainer_adapters/ trainer_adapters/
COPY verifiers/ verifiers/
COPY datasets/ datasets/
COPY environments/ environments/
RUN set -eu; \
    /opt/venv/bin/pip wheel --quiet --no-deps --no-build-isolation --no-index --wheel-dir /wheels/gym \
        . ./trainer_adapters ./verifiers ./datasets ./environments/*/; \
    /opt/venv/bin/pip install --quiet --no-deps --no-index /wheels/gym/*.whl; \
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
