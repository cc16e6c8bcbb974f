#!/usr/bin/env bash
# Create the kind cluster of cluster.yaml, build edge's image and load it into the
# nodes, apply k8s/ (and k8s/examples/ when present), and wait until edge and the
# examples are ready. Running it again reuses the cluster and redeploys.
#
# Needs kind, kubectl and a container engine: docker, or podman (rootful: the
# cluster maps the host's ports 80 and 443). Environment:
#   EDGE_KIND_CLUSTER  cluster name (default: the name in cluster.yaml, "edge")
#   EDGE_ENGINE        docker | podman (default: docker when its daemon answers, else podman)
#   EDGE_BASE_IMAGE    the image build's BASE_IMAGE (default: the Dockerfile's, python:3.12-slim-bookworm)
#   EDGE_WAIT          how long to wait for each rollout (default 180s)
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
cluster=${EDGE_KIND_CLUSTER:-edge}
wait_for=${EDGE_WAIT:-180s}
context="kind-$cluster"

die() { echo "up.sh: $*" >&2; exit 1; }
need() { command -v "$1" >/dev/null 2>&1 || die "$1 is not installed ($2)"; }

need kind "https://kind.sigs.k8s.io/docs/user/quick-start/#installation"
need kubectl "https://kubernetes.io/docs/tasks/tools/"

engine=${EDGE_ENGINE:-}
if [ -z "$engine" ]; then
  if command -v docker >/dev/null 2>&1 && docker info >/dev/null 2>&1; then
    engine=docker
  elif command -v podman >/dev/null 2>&1; then
    engine=podman
  else
    die "no container engine: install docker or podman, or set EDGE_ENGINE"
  fi
fi
need "$engine" "the container engine kind runs the nodes in"
if [ "$engine" = podman ]; then
  export KIND_EXPERIMENTAL_PROVIDER=podman
fi

# The image the DaemonSet runs: one name, read from the manifest.
image=$(sed -n 's/^ *image: *//p' "$root/k8s/daemonset.yaml" | head -n 1)
[ -n "$image" ] || die "no image: line in k8s/daemonset.yaml"

echo "== cluster $cluster ($engine)"
if kind get clusters 2>/dev/null | grep -qx "$cluster"; then
  echo "exists; reusing it"
else
  kind create cluster --name "$cluster" --config "$here/cluster.yaml" --wait 180s
fi

echo "== image $image"
build_args=(--tag "$image" --build-arg "REVISION=$(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)")
if [ -n "${EDGE_BASE_IMAGE:-}" ]; then
  build_args+=(--build-arg "BASE_IMAGE=$EDGE_BASE_IMAGE")
fi
if [ "$engine" = podman ]; then
  # The docker format keeps the HEALTHCHECK, which the OCI format drops.
  podman build --format docker "${build_args[@]}" "$root"
  workdir=$(mktemp -d)
  trap 'rm -rf "$workdir"' EXIT
  archive="$workdir/edge-image.tar"
  podman save --format docker-archive --output "$archive" "$image"
  kind load image-archive "$archive" --name "$cluster"
else
  docker build "${build_args[@]}" "$root"
  kind load docker-image "$image" --name "$cluster"
fi

echo "== deploy"
redeploy=false
if kubectl --context "$context" -n edge-system get daemonset/edge >/dev/null 2>&1; then
  redeploy=true
fi
kubectl --context "$context" apply -k "$root/k8s"
if $redeploy; then
  # A new image under the same tag leaves the pod template as it was: restart.
  kubectl --context "$context" -n edge-system rollout restart daemonset/edge
fi

examples="$root/k8s/examples"
if [ -d "$examples" ]; then
  echo "== examples"
  if [ -d "$examples/gateway" ]; then
    # The Gateway example's kinds are upstream's CRDs (the standard channel, whose
    # TLSRoute, TCPRoute and UDPRoute are v1 from v1.6) and k8s/gateway's RBAC; both
    # must exist before the example's objects are applied. They stay inert until
    # providers.kubernetesGateway is turned on in edge's ConfigMap.
    gateway_api="${GATEWAY_API_VERSION:-v1.6.1}"
    kubectl --context "$context" apply --server-side -f \
      "https://github.com/kubernetes-sigs/gateway-api/releases/download/$gateway_api/standard-install.yaml"
    kubectl --context "$context" apply -k "$root/k8s/gateway"
  fi
  if [ -f "$examples/kustomization.yaml" ]; then
    kubectl --context "$context" apply -k "$examples"
  else
    kubectl --context "$context" apply --recursive -f "$examples"
  fi
fi

echo "== waiting (up to $wait_for each)"
kubectl --context "$context" -n edge-system rollout status daemonset/edge --timeout "$wait_for"
if [ -d "$examples" ]; then
  if [ -f "$examples/kustomization.yaml" ]; then
    listing=(kubectl --context "$context" get -k "$examples")
  else
    listing=(kubectl --context "$context" get --recursive -f "$examples")
  fi
  "${listing[@]}" -o jsonpath='{range .items[*]}{.kind}{" "}{.metadata.namespace}{" "}{.metadata.name}{"\n"}{end}' |
    while read -r kind ns name; do
      case "$kind" in
        Deployment | DaemonSet | StatefulSet)
          resource=$(printf '%s' "$kind" | tr '[:upper:]' '[:lower:]')
          kubectl --context "$context" -n "${ns:-default}" rollout status "$resource/$name" --timeout "$wait_for"
          ;;
      esac
    done
fi

cat <<MSG
== ready
edge serves the kind node's ports on this host:
  curl http://127.0.0.1:8082/ready      # 200 once the routes are live
  curl -H 'Host: <an Ingress host>' http://127.0.0.1/
  (k8s/examples/README.md: the examples' hosts, TLS passthrough on :443, UDP on :8053)
  kubectl --context $context -n edge-system logs daemonset/edge
Delete the cluster with: $here/down.sh
MSG
