# edge's container image.
#
#   docker build -t localhost/edge:0.1.0 .            (or: podman build --format docker ...)
#   docker build --build-arg BASE_IMAGE=<image> ...   any Debian-like image with python3 (>= 3.11)
#                                                     and its venv module, e.g. one made with debootstrap
#
# Two stages on the same base: the first installs edge's dependencies into a virtual
# environment at /opt/edge (a layer of their own), then builds edge's wheel and
# installs it there; the second copies only that environment, so no compiler, pip
# cache or source tree reaches the final image. The dependencies install from binary
# wheels, at the versions pinned in image-constraints.txt (edge's whole dependency
# closure and the setuptools that builds its wheel), so a build of one commit gets the
# same packages every time; the build stage needs the package index (pip), the final
# stage nothing from outside.
#
# Binding :80 and :443 as a non-root user: the environment's interpreter is a copy
# (venv --copies) carrying the file capability cap_net_bind_service+ep, so edge
# (and the worker processes it starts) may bind ports below 1024 and nothing else.
# The container must keep NET_BIND_SERVICE in its capability set (k8s/daemonset.yaml
# adds it after dropping ALL; docker run --cap-drop ALL --cap-add NET_BIND_SERVICE);
# without it the kernel refuses to start the interpreter ("Operation not permitted").
# The base image's own python3 stays unprivileged.
#
# The static configuration is read from /etc/edge/edge.yaml: mount the ConfigMap
# there (k8s/configmap.yaml) or pass another path: docker run IMAGE run --config FILE.

# The default names its Debian release (python:3.12-slim alone moved from bookworm to
# trixie under the same name): bookworm, whose OpenSSL 3.0 and glibc are those the
# tests run against (Debian 12). For a registry build, pin it by digest:
#   --build-arg BASE_IMAGE=python:3.12-slim-bookworm@sha256:...
# checkov:skip=CKV_DOCKER_7: both stages name the base through BASE_IMAGE, whose default (python:3.12-slim-bookworm) carries a version tag; checkov cannot read a build argument's default
ARG BASE_IMAGE=python:3.12-slim-bookworm

FROM ${BASE_IMAGE} AS build
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PIP_CONSTRAINT=/src/image-constraints.txt
WORKDIR /src
# The dependencies first, from the pins alone, in a layer of their own: a change to
# edge's source leaves it as it was, so a build with a layer cache (podman build
# --layers, docker's default) reuses it and only the wheel is built again.
COPY image-constraints.txt ./
RUN python3 -m venv --copies /opt/edge \
    && /opt/edge/bin/pip install --no-deps -r image-constraints.txt
COPY pyproject.toml README.md ./
COPY edge ./edge
# Then the wheel (edge alone) into that environment, without dependencies: they are
# there already, and pip check fails the build where the pins miss one edge needs.
# pip and setuptools leave the environment, which keeps only edge and what it imports.
# PIP_CONSTRAINT (above) also holds for the wheel's isolated build environment.
RUN /opt/edge/bin/pip wheel --no-deps --wheel-dir /dist . \
    && /opt/edge/bin/pip install --no-deps /dist/*.whl \
    && /opt/edge/bin/pip check \
    && /opt/edge/bin/pip uninstall --yes pip setuptools \
    && /opt/edge/bin/edge --version

FROM ${BASE_IMAGE}
ARG BASE_IMAGE
ARG VERSION=0.1.0
ARG REVISION=unknown
LABEL org.opencontainers.image.title="edge" \
      org.opencontainers.image.description="A Kubernetes edge router and ingress controller: HTTP, TLS passthrough and UDP, Traefik-style rules" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.base.name="${BASE_IMAGE}"
ENV PATH=/opt/edge/bin:${PATH} \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
COPY --from=build /opt/edge /opt/edge
# security.capability, VFS revision 2: effective flag, permitted = CAP_NET_BIND_SERVICE (bit 10).
RUN python3 -c "import glob, os, struct; cap = struct.pack('<5I', 0x02000001, 1 << 10, 0, 0, 0); [os.setxattr(p, 'security.capability', cap) for p in glob.glob('/opt/edge/bin/python*') if not os.path.islink(p)]"
# A numeric user, so the kubelet can verify runAsNonRoot without a passwd entry.
USER 10001:10001
WORKDIR /tmp
EXPOSE 80/tcp 443/tcp 8053/udp 8082/tcp
# /ping on the ping entry point of k8s/configmap.yaml (EDGE_PING_URL for another).
HEALTHCHECK --interval=10s --timeout=3s --start-period=10s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen(os.environ.get('EDGE_PING_URL', 'http://127.0.0.1:8082/ping'), timeout=2)"]
ENTRYPOINT ["edge"]
CMD ["run", "--config", "/etc/edge/edge.yaml"]
