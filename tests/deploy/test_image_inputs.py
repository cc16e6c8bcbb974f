"""What the image is built from and run with, checked offline: the Dockerfile's pinned
versions and base image, and the capabilities k8s/ and k8s/examples/ give its containers.

Each check pins a defect the shipping review found, one property at a time, so a
failure names what would break in a cluster. Pure Python (it reads files), but a
deployment check: it tests what ships, not a unit of edge.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest
import yaml
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[2]
K8S = ROOT / "k8s"
pytestmark = pytest.mark.deploy

IMAGE = "localhost/edge"  # the name the Dockerfile's image is built and loaded under


def pod_templates() -> list[tuple[str, dict]]:
    """(file: kind/name, pod spec) of every workload in k8s/ and its subfolders."""
    found = []
    for path in sorted(K8S.rglob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc and doc.get("kind") in ("DaemonSet", "Deployment", "StatefulSet", "Job"):
                spec = doc["spec"]["template"]["spec"]
                found.append(
                    (f"{path.relative_to(ROOT)}: {doc['kind']}/{doc['metadata']['name']}", spec)
                )
    return found


def edge_image_containers() -> list[tuple[str, dict, dict]]:
    return [
        (f"{where} {c['name']}", pod, c)
        for where, pod in pod_templates()
        for c in pod.get("initContainers", []) + pod["containers"]
        if c["image"].split("@")[0].rsplit(":", 1)[0] == IMAGE
    ]


def test_the_examples_run_the_edge_image():
    names = [where for where, _, _ in edge_image_containers()]
    assert any("examples" in n for n in names) and any("daemonset" in n for n in names), names


@pytest.mark.parametrize(
    ("where", "pod", "container"), [pytest.param(*c, id=c[0]) for c in edge_image_containers()]
)
def test_every_edge_container_can_start_the_interpreter(where, pod, container):
    """The image's interpreter carries cap_net_bind_service+ep (Dockerfile): exec fails
    with EPERM unless NET_BIND_SERVICE is in the container's capabilities. k8s/examples'
    whoami Deployments dropped ALL and added nothing, so their pods never started."""
    caps = container.get("securityContext", {}).get("capabilities", {})
    drop, add = set(caps.get("drop", [])), set(caps.get("add", []))
    if "ALL" in drop or "NET_BIND_SERVICE" in drop:
        assert "NET_BIND_SERVICE" in add, (
            f"{where}: drops {sorted(drop)} and does not add NET_BIND_SERVICE"
        )


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def test_the_image_build_installs_pinned_versions():
    """The Dockerfile's pip runs under image-constraints.txt, which pins (==) every direct
    dependency of edge and the setuptools that builds its wheel. Before, the build took
    whatever the index held that day: two builds of one commit could ship a different
    kubernetes client, uvloop or msgspec than the tests ran against.
    (tests/deploy/test_image.py checks the built image holds exactly the pins.)"""
    dockerfile = (ROOT / "Dockerfile").read_text()
    build = dockerfile.split("\nFROM ", 2)[1]  # the build stage
    assert re.search(r"^COPY [^\n]*\bimage-constraints\.txt\b", build, re.M), "not copied in"
    assert re.search(r"PIP_CONSTRAINT=/src/image-constraints\.txt\b", build), "pip not constrained"
    ignore = (ROOT / ".dockerignore").read_text().split()
    assert "!image-constraints.txt" in ignore, ".dockerignore keeps it out of the context"

    pins = {}
    for line in (ROOT / "image-constraints.txt").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, sep, version = line.partition("==")
            assert sep and version and ";" not in line, f"{line!r} is not NAME==VERSION"
            pins[_normal(name)] = version
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    direct = [Requirement(r) for r in project["project"]["dependencies"]]
    direct += [Requirement(r) for r in project["build-system"]["requires"]]
    for req in direct:
        assert _normal(req.name) in pins, f"{req.name} is not pinned"
        assert req.specifier.contains(pins[_normal(req.name)]), f"{req.name}: the pin breaks {req}"


def test_the_default_base_image_names_its_debian_release():
    """``python:3.12-slim`` is a moving name: the same tag went from Debian 12 to 13 (and
    from OpenSSL 3.0 to 3.5) between two builds of one commit. The default names the
    release (or a digest), the one whose OpenSSL and glibc the tests run against."""
    (default,) = re.findall(r"^ARG BASE_IMAGE=(\S+)$", (ROOT / "Dockerfile").read_text(), re.M)
    name, _, digest = default.partition("@")
    assert digest.startswith("sha256:") or re.search(r"-(bookworm|trixie)$", name), default
