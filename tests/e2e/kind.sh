#!/usr/bin/env bash
# make e2e: the system tests against a kind cluster running the operator's Helm chart.
#
#   1. a kind cluster (E2E_CLUSTER, created unless it exists) and its kubeconfig in out/e2e/;
#   2. the operator's image (make image IMAGE=$E2E_IMAGE), loaded into the cluster's nodes;
#   3. helm upgrade --install of charts/kyai-operator with that image (pullPolicy Never) and
#      the platform judge pointed at the LLM double the tests start on this machine, at the
#      address the cluster's pods reach it by (the gateway of the "kind" container network);
#   4. pytest tests/system tests/e2e --with-e2e --kubeconfig out/e2e/kubeconfig ...
#
# Needs kind, kubectl, and docker or podman. KEEP=1 keeps the cluster afterwards (it is kept
# anyway when it existed before); PYTEST_ARGS adds pytest arguments (e.g. -x, -k restart).
set -euo pipefail

cd "$(dirname "$0")/../.."
BIN=${BIN:-.venv/bin}
CLUSTER=${E2E_CLUSTER:-kyai-e2e}
IMAGE=${E2E_IMAGE:-localhost/kyai-operator:e2e}
NAMESPACE=${E2E_NAMESPACE:-kyai-system}
RELEASE=${E2E_RELEASE:-kyai}
PORT=${E2E_DOUBLE_PORT:-18080}
OUT=out/e2e
KUBECONFIG_FILE=$OUT/kubeconfig

for tool in kind kubectl; do
  command -v "$tool" >/dev/null || { echo "make e2e: $tool is not installed" >&2; exit 2; }
done
if command -v docker >/dev/null; then ENGINE=docker
elif command -v podman >/dev/null; then ENGINE=podman; export KIND_EXPERIMENTAL_PROVIDER=podman
else echo "make e2e: neither docker nor podman is installed" >&2; exit 2
fi
mkdir -p "$OUT"

created=0
if ! kind get clusters 2>/dev/null | grep -qx "$CLUSTER"; then
  kind create cluster --name "$CLUSTER" --wait 180s
  created=1
fi
cleanup() {
  if [[ $created == 1 && ${KEEP:-0} != 1 ]]; then kind delete cluster --name "$CLUSTER"; fi
}
trap cleanup EXIT
kind get kubeconfig --name "$CLUSTER" >"$KUBECONFIG_FILE"
export KUBECONFIG=$PWD/$KUBECONFIG_FILE

make image IMAGE="$IMAGE"
if [[ $ENGINE == docker ]]; then
  kind load docker-image "$IMAGE" --name "$CLUSTER"
else
  "$ENGINE" save --format oci-archive -o "$OUT/image.tar" "$IMAGE"
  kind load image-archive "$OUT/image.tar" --name "$CLUSTER"
fi

# The host's address on the "kind" network: pods reach the LLM double there.
GATEWAY=$("$ENGINE" network inspect kind \
  -f '{{range .IPAM.Config}}{{.Gateway}} {{end}}' 2>/dev/null | tr ' ' '\n' | grep -m1 '\.' || true)
if [[ -z $GATEWAY ]]; then
  GATEWAY=$("$ENGINE" network inspect kind | grep -Eo '"[Gg]ateway": *"[0-9.]+"' \
    | grep -Eo '[0-9.]+' | head -n1)
fi
[[ -n $GATEWAY ]] || { echo "make e2e: no IPv4 gateway on the kind network" >&2; exit 2; }

"$BIN/helm" upgrade --install "$RELEASE" charts/kyai-operator \
  --namespace "$NAMESPACE" --create-namespace --wait --timeout 5m \
  --values tests/e2e/values-e2e.yaml \
  --set image.repository="${IMAGE%:*}" --set image.tag="${IMAGE##*:}" \
  --set defaultJudge.endpoint="http://$GATEWAY:$PORT/v1"

# shellcheck disable=SC2086
"$BIN/pytest" tests/system tests/e2e -q \
  --with-e2e --kubeconfig "$KUBECONFIG_FILE" \
  --e2e-namespace "$NAMESPACE" --e2e-release "$RELEASE" \
  --e2e-double-host "$GATEWAY" --e2e-double-port "$PORT" \
  ${PYTEST_ARGS:-}
