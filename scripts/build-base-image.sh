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
# The essential variant (dpkg, no apt: nothing is installed in the image with apt) plus
# python3 and its dependencies; no documentation, manual pages or translations (dpkg's
# path-exclude, copyright files kept); /usr merged by mmdebstrap's own hook rather than by
# the usrmerge package, which brings perl (50 MB); libstdc++ for the C++ extensions of the
# wheels (pyarrow, ...), which the apt variant brought with apt. Once every package is
# configured, the customize hook removes what only installing packages needs: perl (dpkg's
# maintainer scripts; nothing is installed in the image after this) and glibc's iconv modules
# (gconv: Python's codecs are its own; glibc's ASCII and UTF-8 stay, they are built in), and
# the standard library's parts that nothing imports at run time (lib2to3, the `help()`
# topics, the regression-test stubs). About 90 MB, where --variant=apt gave 219.
hooks=/usr/share/mmdebstrap/hooks/merged-usr
merged=()
[ -d "$hooks" ] && merged=(--hook-dir="$hooks")
mmdebstrap --quiet --variant=essential "${merged[@]}" \
    --include=python3,python3-venv,ca-certificates,libstdc++6 \
    --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-include=/usr/share/doc/*/copyright' \
    --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/info/*' \
    --dpkgopt='path-exclude=/usr/share/locale/*' --dpkgopt='path-exclude=/usr/share/lintian/*' \
    --customize-hook='rm -rf "$1"/var/cache/apt/* "$1"/var/lib/apt/lists/* "$1"/var/log/*' \
    --customize-hook='rm -rf "$1"/usr/bin/perl "$1"/usr/bin/perl5.* "$1"/usr/lib/*/perl-base "$1"/usr/share/perl5 "$1"/usr/lib/*/gconv' \
    --customize-hook='rm -rf "$1"/usr/lib/python3.*/lib2to3 "$1"/usr/lib/python3.*/pydoc_data "$1"/usr/lib/python3.*/test' \
    bookworm "$rootfs"
"$ENGINE" import --quiet \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'ENV LANG=C.UTF-8' \
    --change 'CMD ["python3"]' \
    "$rootfs" "$BASE_IMAGE" >/dev/null
rm -f "$rootfs"
echo "make base-image: $BASE_IMAGE"
