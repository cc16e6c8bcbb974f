"""k8s/configmap.yaml's ``edge.yaml``: the static configuration each DaemonSet pod runs.

Tests that run edge on it (the image, RBAC, the shipping review) read it here. Its
entry points keep accepting for ``requestAcceptGraceTimeout`` (10 s) after SIGTERM,
for the load balancer's health checks; a test not about that wait gets it at 0 s,
else every stop of edge holds its teardown that long.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

CONFIGMAP = Path(__file__).resolve().parents[2] / "k8s" / "configmap.yaml"


def configmap_static(accept_grace: str | None = "0s") -> dict[str, Any]:
    """The ConfigMap's edge.yaml; each entry point's ``requestAcceptGraceTimeout`` set to
    ``accept_grace`` where the ConfigMap sets one (None: as shipped)."""
    (cm,) = [d for d in yaml.safe_load_all(CONFIGMAP.read_text()) if d and d["kind"] == "ConfigMap"]
    static: dict[str, Any] = yaml.safe_load(cm["data"]["edge.yaml"])
    if accept_grace is not None:
        for ep in static["entryPoints"].values():
            life = ep.get("transport", {}).get("lifeCycle", {})
            if "requestAcceptGraceTimeout" in life:
                life["requestAcceptGraceTimeout"] = accept_grace
    return static
