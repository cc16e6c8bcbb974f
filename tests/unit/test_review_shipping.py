"""Review of what ships: offline checks of k8s/ and k8s/examples/ against the image.

Each check here pins a defect the shipping review found, one property at a time, so a
failure names what would break in a cluster.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
K8S = ROOT / "k8s"
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
