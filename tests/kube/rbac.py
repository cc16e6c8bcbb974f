"""RBAC as the API server applies it, over manifests, for the emulator's ``authorizer``.

Reads (Cluster)Roles and their (Cluster)RoleBindings from YAML documents and answers,
for one ServiceAccount, whether an :class:`~tests.kube.emulator.Access` is allowed:
a ClusterRoleBinding grants its ClusterRole's rules everywhere, a RoleBinding grants
its Role's (or ClusterRole's) rules in the binding's namespace only. Rules match by
API group, resource and verb, ``*`` included; ``resourceNames`` and non-resource URLs
are not modelled (an error if present, so a manifest using them is not misread).
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any, NamedTuple

import yaml

from tests.kube.emulator import Access

__all__ = ["Grant", "Policy"]

Obj = dict[str, Any]


class Grant(NamedTuple):
    """One verb on one resource, ``scope`` the binding's namespace (None: cluster-wide)."""

    scope: str | None
    group: str
    resource: str
    verb: str


class Policy:
    """What ``namespace/name`` (a ServiceAccount) may do under ``docs``."""

    def __init__(self, docs: Iterable[Obj], namespace: str, name: str) -> None:
        docs = [d for d in docs if d]
        # Every Role and ClusterRole by (kind, name, namespace): several of each kind
        # (k8s/rbac.yaml's and k8s/gateway/rbac.yaml's ClusterRoles) stand side by side.
        by_name = {
            (d["kind"], d["metadata"]["name"], d["metadata"].get("namespace", "")): d
            for d in docs
            if d["kind"] in ("Role", "ClusterRole")
        }
        self.grants: set[Grant] = set()
        for b in docs:
            if b["kind"] not in ("RoleBinding", "ClusterRoleBinding"):
                continue
            if not any(
                s.get("kind") == "ServiceAccount"
                and s.get("name") == name
                and s.get("namespace", b["metadata"].get("namespace")) == namespace
                for s in b.get("subjects", [])
            ):
                continue
            scope = b["metadata"]["namespace"] if b["kind"] == "RoleBinding" else None
            ref = b["roleRef"]
            role_ns = (scope or "") if ref["kind"] == "Role" else ""
            role = by_name[(ref["kind"], ref["name"], role_ns)]
            for rule in role.get("rules", []):
                if rule.get("resourceNames") or rule.get("nonResourceURLs"):
                    raise ValueError(f"not modelled: {rule}")
                for group in rule["apiGroups"]:
                    for resource in rule["resources"]:
                        for verb in rule["verbs"]:
                            self.grants.add(Grant(scope, group, resource, verb))

    @classmethod
    def from_files(cls, paths: Iterable[Path], namespace: str, name: str) -> Policy:
        docs: list[Obj] = []
        for path in paths:
            docs.extend(yaml.safe_load_all(path.read_text()))
        return cls(docs, namespace, name)

    def allows(self, access: Access) -> bool:
        """The API server's answer for ``access`` (namespace None: cluster-wide)."""
        return any(self.covers(g, access) for g in self.grants)

    @staticmethod
    def covers(g: Grant, a: Access) -> bool:
        return (
            (g.scope is None or g.scope == a.namespace)
            and g.group in ("*", a.group)
            and g.resource in ("*", a.resource)
            and g.verb in ("*", a.verb)
        )
