#!/usr/bin/env bash
# make image: build the operator/worker image (the product only) from a wheelhouse built on
# the host (scripts/wheelhouse.sh); make standin-image builds the stand-ins' on top of it.
#   IMAGE       (default localhost/kyai-operator:dev)   the tag to build
#   BASE_IMAGE  (default: python:3.11-slim when present or pullable, else the Debian base
#               that `make base-image` builds, localhost/kyai-base:bookworm)
#   ENGINE      (default: podman when installed, else docker)
#   PYTHON      (default .venv/bin/python) builds the wheels; its version must match the base's
set -euo pipefail
cd "$(dirname "$0")/.."
IMAGE="${IMAGE:-localhost/kyai-operator:dev}"
PYTHON="${PYTHON:-.venv/bin/python}"
SLIM_BASE="docker.io/library/python:3.11-slim"
DEBIAN_BASE="localhost/kyai-base:bookworm"
if [ -z "${ENGINE:-}" ]; then
    if command -v podman >/dev/null; then ENGINE=podman
    elif command -v docker >/dev/null && docker info >/dev/null 2>&1; then ENGINE=docker
    else echo "make image: neither podman nor a working docker is installed" >&2; exit 1
    fi
fi
engine_args=()
if [ "$ENGINE" = podman ]; then
    # runc: crun refuses hybrid cgroups; explicit rlimits: the defaults are refused on some hosts.
    engine_args=(--runtime runc --ulimit nofile=20000:20000 --ulimit nproc=4096:4096)
fi

if [ -z "${BASE_IMAGE:-}" ]; then
    if "$ENGINE" image inspect "$SLIM_BASE" >/dev/null 2>&1; then
        BASE_IMAGE="$SLIM_BASE"
    elif [ -z "${KYAI_NO_PULL:-}" ] && timeout 60 "$ENGINE" pull --quiet "$SLIM_BASE" >/dev/null 2>&1; then
        BASE_IMAGE="$SLIM_BASE"
    else
        if ! "$ENGINE" image inspect "$DEBIAN_BASE" >/dev/null 2>&1; then
            echo "make image: $SLIM_BASE cannot be pulled; building $DEBIAN_BASE (make base-image)"
            BASE_IMAGE="$DEBIAN_BASE" ENGINE="$ENGINE" bash scripts/build-base-image.sh
        fi
        BASE_IMAGE="$DEBIAN_BASE"
    fi
fi

version="$("$PYTHON" -c 'import kyai; print(kyai.__version__)')"
PYTHON="$PYTHON" bash scripts/wheelhouse.sh
echo "make image: $ENGINE build $IMAGE (base $BASE_IMAGE, version $version)"
# --no-cache: the RUN step's cache key does not cover the mounted wheelhouse.
"$ENGINE" build "${engine_args[@]}" --file Containerfile \
    --no-cache --build-arg "BASE_IMAGE=$BASE_IMAGE" --build-arg "VERSION=$version" \
    --label "org.opencontainers.image.revision=$(git rev-parse HEAD 2>/dev/null || echo unknown)" \
    --tag "$IMAGE" .
echo "make image: $IMAGE"
