#!/usr/bin/env bash
# Delete the kind cluster that up.sh created (EDGE_KIND_CLUSTER, default "edge").
set -euo pipefail

cluster=${EDGE_KIND_CLUSTER:-edge}
engine=${EDGE_ENGINE:-}
if [ -z "$engine" ] && ! { command -v docker >/dev/null 2>&1 && docker info >/dev/null 2>&1; }; then
  command -v podman >/dev/null 2>&1 && engine=podman
fi
if [ "$engine" = podman ]; then
  export KIND_EXPERIMENTAL_PROVIDER=podman
fi
command -v kind >/dev/null 2>&1 || { echo "down.sh: kind is not installed" >&2; exit 1; }
kind delete cluster --name "$cluster"
