"""edge.providers.kubernetes.provider, the pure parts: which changes reach a conversion."""

from __future__ import annotations

import json
from typing import Any

from edge.config.static import KubernetesCRDConfig
from edge.providers.kubernetes import objects
from edge.providers.kubernetes.provider import _crd_options, _crd_watches, _relevant


def decode(kind: str, obj: dict[str, Any]) -> Any:
    return objects.decode(kind, json.dumps(obj).encode())


def meta(name: str, rv: str, **extra: Any) -> dict[str, Any]:
    return {"name": name, "namespace": "" if name.startswith("n") else "default",
            "resourceVersion": rv, **extra}  # fmt: skip


def test_metadata_alone_changed_in_secrets_config_maps_and_nodes_is_no_change() -> None:
    old = {
        "Secret": {("default", "s"): decode("Secret", {"metadata": meta("s", "1"),
                   "type": "Opaque", "data": {"ca.crt": "Q0E=", "release": "eA=="}})},
        "ConfigMap": {("default", "c"): decode("ConfigMap", {"metadata": meta("c", "1"),
                      "data": {"tls.ca": "CA", "other": "x"}})},
        "Node": {("", "n1"): decode("Node", {"metadata": meta("n1", "1"),
                 "status": {"addresses": [{"type": "InternalIP", "address": "10.0.0.1"}]}})},
        "Service": {("default", "w"): decode("Service", {"metadata": meta("w", "1")})},
    }  # fmt: skip
    new = {
        # a new version, labels, and keys the models do not keep: the same content
        "Secret": {("default", "s"): decode("Secret", {"metadata": meta("s", "2", labels={"a": "b"}),
                   "type": "Opaque", "data": {"ca.crt": "Q0E=", "release": "eQ=="}})},
        "ConfigMap": {("default", "c"): decode("ConfigMap", {"metadata": meta("c", "2",
                      annotations={"leader": "me"}), "data": {"tls.ca": "CA", "other": "y"}})},
        "Node": {("", "n1"): decode("Node", {"metadata": meta("n1", "2"),
                 "status": {"addresses": [{"type": "InternalIP", "address": "10.0.0.1"}],
                            "conditions": [{"type": "Ready", "status": "True"}]}})},
        # a Service changed in metadata alone still counts: conversions read its labels
        "Service": {("default", "w"): decode("Service", {"metadata": meta("w", "2")})},
    }  # fmt: skip
    changed = {kind: set(table) for kind, table in new.items()}
    assert _relevant(changed, old, new) == {"Service": {("default", "w")}}


def test_content_changed_added_or_deleted_counts() -> None:
    def node(address: str) -> Any:
        return decode("Node", {"metadata": meta("n1", "1"),
                      "status": {"addresses": [{"type": "InternalIP", "address": address}]}})  # fmt: skip

    old = {"Node": {("", "n1"): node("10.0.0.1")}}
    changed = {"Node": {("", "n1")}}
    assert _relevant(changed, old, {"Node": {("", "n1"): node("10.0.0.2")}}) == changed
    assert _relevant(changed, old, {"Node": {}}) == changed  # deleted
    assert _relevant(changed, {}, old) == changed  # added


def test_the_crd_source_watches_nodes_unless_cluster_scope_is_disabled() -> None:
    def kinds(config: KubernetesCRDConfig) -> list[str]:
        return [w.resource.kind for w in _crd_watches(config)]

    assert "Node" in kinds(KubernetesCRDConfig())
    disabled = KubernetesCRDConfig(disable_cluster_scope_resources=True)
    assert "Node" not in kinds(disabled)
    assert set(kinds(KubernetesCRDConfig())) - set(kinds(disabled)) == {"Node"}
    assert _crd_options(disabled).disable_cluster_scope_resources
