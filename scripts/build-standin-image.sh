#!/usr/bin/env bash
# make standin-image: the stand-in image (Containerfile.standins: kyai-testing on top of the
# product image) that the podman devcluster runs for stand-in and serving-engine pods.
#   IMAGE  (default localhost/kyai-standins:dev)   the tag to build
#   BASE   (default localhost/kyai-operator:dev)   the product image it extends (make image)
#   ENGINE (default: podman when installed, else docker)
#   PYTHON (default .venv/bin/python) builds the wheels
set -euo pipefail
cd "$(dirname "$0")/.."
IMAGE="${IMAGE:-localhost/kyai-standins:dev}"
BASE="${BASE:-localhost/kyai-operator:dev}"
PYTHON="${PYTHON:-.venv/bin/python}"
ENGINE="${ENGINE:-$(command -v podman >/dev/null && echo podman || echo docker)}"
engine_args=()
if [ "$ENGINE" = podman ]; then
    engine_args=(--runtime runc --ulimit nofile=20000:20000 --ulimit nproc=4096:4096)
fi
if ! "$ENGINE" image inspect "$BASE" >/dev/null 2>&1; then
    echo "make standin-image: the product image $BASE is missing: run make image first" >&2
    exit 1
fi
if [ "${KYAI_REUSE_WHEELHOUSE:-}" != 1 ] || [ ! -s build/wheelhouse/standins.txt ]; then
    PYTHON="$PYTHON" bash scripts/wheelhouse.sh
fi
version="$("$PYTHON" -c 'import kyai; print(kyai.__version__)')"
echo "make standin-image: $ENGINE build $IMAGE (on $BASE)"
"$ENGINE" build "${engine_args[@]}" --file Containerfile.standins \
    --no-cache --build-arg "BASE=$BASE" --build-arg "VERSION=$version" --tag "$IMAGE" .
echo "make standin-image: $IMAGE"
