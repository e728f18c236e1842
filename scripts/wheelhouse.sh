#!/usr/bin/env bash
# build/wheelhouse for the images, built on the host (nothing is downloaded inside a build):
# the product (kyai-operator) and the stand-ins (kyai-testing) with everything they need, and
# the lists the Containerfiles install with --no-deps:
#   product.txt   what kyai-operator resolves to, less what the product never imports (click:
#                 the command lines of kopf, nltk and huggingface_hub, not their libraries)
#   standins.txt  what kyai-testing adds on top of product.txt (it, and click for its
#                 TensorRT-LLM stand-in)
# Wheels of dependencies stay between builds (pip reuses them); the project's are rebuilt.
#   PYTHON (default .venv/bin/python) builds the wheels; its version must match the base's
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-.venv/bin/python}"
house=build/wheelhouse
mkdir -p "$house"
rm -f "$house"/kyai_operator-*.whl "$house"/kyai_testing-*.whl "$house"/kyai_devcluster-*.whl
echo "wheelhouse: pip wheel . tools/testing -> $house"
"$PYTHON" -m pip wheel --quiet --find-links "$house" --wheel-dir "$house" . tools/testing
resolve() {  # the distributions pip installs for "$1" from the wheelhouse, as name==version
    local report="$house/.report.json"
    "$PYTHON" -m pip install --quiet --dry-run --ignore-installed --no-index \
        --find-links "$house" --report "$report" "$1" 2>/dev/null
    "$PYTHON" -c 'import json, sys
for item in json.load(open(sys.argv[1]))["install"]:
    print("{name}=={version}".format(**item["metadata"]))' "$report"
    rm -f "$report"
}
resolve kyai-operator | grep -viE '^click==' | sort > "$house/product.txt"
resolve kyai-testing | sort | comm -23 - "$house/product.txt" > "$house/standins.txt"
echo "wheelhouse: $(wc -l < "$house/product.txt") product distributions," \
    "$(wc -l < "$house/standins.txt") more for the stand-ins ($(tr '\n' ' ' < "$house/standins.txt"))"
