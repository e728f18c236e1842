#!/usr/bin/env bash
# make base-image: a Debian bookworm base (python3 + venv) built with mmdebstrap from the
# package mirror, for machines that cannot pull a Python image from a registry.
#   BASE_IMAGE (default localhost/kyai-base:bookworm)   the image name to create
#   ENGINE (default: podman when installed, else docker)
set -euo pipefail
cd "$(dirname "$0")/.."
BASE_IMAGE="${BASE_IMAGE:-localhost/kyai-base:bookworm}"
ENGINE="${ENGINE:-$(command -v podman >/dev/null && echo podman || echo docker)}"
command -v mmdebstrap >/dev/null || {
    echo "make base-image: mmdebstrap is not installed (apt-get install mmdebstrap)" >&2
    exit 1
}
mkdir -p build
rootfs="build/rootfs.tar"
echo "make base-image: mmdebstrap bookworm -> $rootfs"
mmdebstrap --quiet --variant=apt --include=python3,python3-venv,ca-certificates \
    --customize-hook='rm -rf "$1"/var/cache/apt/* "$1"/var/lib/apt/lists/*' \
    bookworm "$rootfs"
"$ENGINE" import --quiet \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'ENV LANG=C.UTF-8' \
    --change 'CMD ["python3"]' \
    "$rootfs" "$BASE_IMAGE" >/dev/null
rm -f "$rootfs"
echo "make base-image: $BASE_IMAGE"
