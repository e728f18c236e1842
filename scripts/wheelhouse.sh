#!/usr/bin/env bash
# build/wheelhouse for the images, built on the host (nothing is downloaded inside a build):
# the product (kyai-operator) and the stand-ins (kyai-testing) with everything they need, and
# the lists the Containerfiles install with --no-deps:
#   product.txt   what kyai-operator needs (scripts/dist-closure.py over pip's resolution),
#                 less two distributions it never imports and what only they need:
#                 click (the command lines of kopf, nltk and huggingface_hub, not their
#                 libraries) and datasets (if-verifiable's dataset API, with pandas,
#                 multiprocess, dill and xxhash: kyai.graders imports only its IFEval
#                 checkers, without the package's __init__)
#   standins.txt  what kyai-testing adds on top of product.txt (it, and click for its
#                 TensorRT-LLM stand-in)
# Wheels of dependencies stay between builds (pip reuses them); the project's are rebuilt.
# Shared libraries in the wheels are stripped of their symbol tables (scripts/strip-wheels.py;
# about 55 MB of the image), once per wheel.
#   PYTHON (default .venv/bin/python) builds the wheels; its version must match the base's
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-.venv/bin/python}"
house=build/wheelhouse
mkdir -p "$house"
rm -f "$house"/kyai_operator-*.whl "$house"/kyai_testing-*.whl "$house"/kyai_devcluster-*.whl
echo "wheelhouse: pip wheel . tools/testing -> $house"
"$PYTHON" -m pip wheel --quiet --find-links "$house" --wheel-dir "$house" . tools/testing
closure() {  # closure ROOT [--without NAME ...]: what ROOT installs, as name==version
    local report="$house/.report.json"
    "$PYTHON" -m pip install --quiet --dry-run --ignore-installed --no-index \
        --find-links "$house" --report "$report" "$1" 2>/dev/null
    "$PYTHON" scripts/dist-closure.py "$report" "$@"
    rm -f "$report"
}
export LC_ALL=C  # one collation for dist-closure's sorted output and comm
closure kyai-operator --without click --without datasets > "$house/product.txt"
closure kyai-testing --without datasets | comm -23 - "$house/product.txt" > "$house/standins.txt"
"$PYTHON" scripts/strip-wheels.py "$house" $(sed 's/==.*//' "$house/product.txt" "$house/standins.txt")
echo "wheelhouse: $(wc -l < "$house/product.txt") product distributions," \
    "$(wc -l < "$house/standins.txt") more for the stand-ins ($(tr '\n' ' ' < "$house/standins.txt"))"
