"""k8s/crds/: Traefik's CustomResourceDefinitions, generated from edge's models.

What a broken CRD would look like, one property at a time: the files are not what
``python -m edge.providers.kubernetes.crd_schema --write k8s/crds`` writes today (a
model changed, the files did not); Kubernetes' own schema of a CRD refuses one
(kubernetes-validate, strict); a schema is not *structural* (the API server refuses
such a CRD at ``apply``: a node without a type, a ``$ref``); kustomize does not build
them; or an object the CRD conversion's fixtures hold (tests/fixtures/kubernetes/crd/,
written as a Traefik user writes them) does not validate against its kind's schema,
read with the API server's pruning as an error (``kubectl apply``'s strict field
validation), so a field edge reads but the CRD would drop shows here.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from edge.providers.kubernetes.objects import CRD_KINDS
from tests.deploy.test_manifests import KUBERNETES_VERSION, tool

pytestmark = pytest.mark.deploy

ROOT = Path(__file__).resolve().parents[2]
CRDS = ROOT / "k8s" / "crds"
FIXTURES = ROOT / "tests" / "fixtures" / "kubernetes" / "crd"
COMMAND = [sys.executable, "-m", "edge.providers.kubernetes.crd_schema"]


def crd_files() -> list[Path]:
    return sorted(CRDS.glob("traefik.io_*.yaml"))


def load(path: Path) -> dict:
    (doc,) = [d for d in yaml.safe_load_all(path.read_text()) if d is not None]
    return doc


def crds() -> dict[str, dict]:
    """kind -> its CustomResourceDefinition, as k8s/crds/ holds it."""
    out = {}
    for path in crd_files():
        doc = load(path)
        out[doc["spec"]["names"]["kind"]] = doc
    return out


def root_schema(doc: dict) -> dict:
    (version,) = doc["spec"]["versions"]
    return version["schema"]["openAPIV3Schema"]


# --- generated, and up to date ------------------------------------------------------


def test_files_are_up_to_date(tmp_path):
    """Regenerated into a fresh folder by the command itself, byte for byte the same."""
    out = subprocess.run(
        [*COMMAND, "--write", str(tmp_path)], capture_output=True, text=True, timeout=60, cwd=ROOT
    )
    assert out.returncode == 0, out.stderr
    fresh = {p.name: p.read_text() for p in tmp_path.glob("*.yaml")}
    present = {p.name: p.read_text() for p in CRDS.glob("*.yaml")}
    stale = sorted(n for n in fresh.keys() | present.keys() if fresh.get(n) != present.get(n))
    assert not stale, (
        f"k8s/crds/ is stale ({', '.join(stale)}): "
        "run python -m edge.providers.kubernetes.crd_schema --write k8s/crds"
    )


def test_check_mode_agrees():
    out = subprocess.run(
        [*COMMAND, "--check", str(CRDS)], capture_output=True, text=True, timeout=60, cwd=ROOT
    )
    assert out.returncode == 0, out.stderr


def test_one_crd_per_kind():
    assert set(crds()) == set(CRD_KINDS)
    for kind, doc in crds().items():
        assert doc["metadata"]["name"] == f"{kind.lower()}s.traefik.io"
        assert doc["spec"]["group"] == "traefik.io"
        assert doc["spec"]["scope"] == "Namespaced"
        (version,) = doc["spec"]["versions"]
        assert version["name"] == "v1alpha1" and version["served"] and version["storage"]


# --- accepted by Kubernetes -----------------------------------------------------------


@pytest.mark.parametrize("path", crd_files(), ids=lambda p: p.name)
def test_kubernetes_validate(path):
    kubernetes_validate = pytest.importorskip(
        "kubernetes_validate", reason="kubernetes-validate not installed"
    )
    kubernetes_validate.validate(load(path), KUBERNETES_VERSION, strict=True)


def structural_errors(node: Any, path: str = "$") -> list[str]:
    """Kubernetes' rules for a structural schema (apiextensions' ``structural``
    validation), as far as edge's CRDs could break them: every node has a ``type``
    unless it is ``x-kubernetes-int-or-string`` or ``x-kubernetes-preserve-unknown-fields``;
    no ``$ref``, ``definitions``, ``$defs``, logical junctors (``anyOf``...) or
    ``default``; an object has ``properties`` or ``additionalProperties``, not both; an
    array has ``items``; ``metadata`` is only ``type: object``."""
    if not isinstance(node, dict):
        return [f"{path}: not a schema: {node!r}"]
    errors = []
    forbidden = {"$ref", "$defs", "definitions", "anyOf", "oneOf", "allOf", "not", "default"}
    if found := forbidden & set(node):
        errors.append(f"{path}: {sorted(found)}")
    free = node.get("x-kubernetes-int-or-string") or node.get(
        "x-kubernetes-preserve-unknown-fields"
    )
    if not node.get("type") and not free:
        errors.append(f"{path}: no type")
    if node.get("type") == "array" and "items" not in node:
        errors.append(f"{path}: an array without items")
    if "properties" in node and "additionalProperties" in node:
        errors.append(f"{path}: both properties and additionalProperties")
    if node.get("x-kubernetes-int-or-string") and node.get("type"):
        errors.append(f"{path}: int-or-string with a type")
    for key, value in node.get("properties", {}).items():
        errors += structural_errors(value, f"{path}.{key}")
    if isinstance(node.get("items"), dict):
        errors += structural_errors(node["items"], f"{path}[]")
    if isinstance(node.get("additionalProperties"), dict):
        errors += structural_errors(node["additionalProperties"], f"{path}.*")
    return errors


@pytest.mark.parametrize("kind", sorted(CRD_KINDS))
def test_structural(kind):
    root = root_schema(crds()[kind])
    assert root["type"] == "object"
    assert root["properties"]["metadata"] == {"type": "object"}
    assert root["properties"]["spec"]["type"] == "object"
    errors = structural_errors(root)
    assert not errors, "\n".join(errors)


def test_structural_check_can_fail():
    assert structural_errors({"type": "object", "properties": {"a": {}}}) == ["$.a: no type"]
    assert structural_errors({"$ref": "#/definitions/X"}) == [
        "$: ['$ref']",
        "$: no type",
    ]


def test_kustomization_lists_every_crd():
    kust = load(CRDS / "kustomization.yaml")
    assert kust["resources"] == [p.name for p in crd_files()]


def test_kustomize_builds_the_crds():
    kustomize, kubectl = tool("kustomize"), tool("kubectl")
    if kustomize:
        cmd = [kustomize, "build", str(CRDS)]
    elif kubectl:
        cmd = [kubectl, "kustomize", str(CRDS)]
    else:
        pytest.skip("kustomize not installed: neither kustomize nor kubectl is on PATH")
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    built = [d for d in yaml.safe_load_all(out.stdout) if d]
    assert sorted(d["spec"]["names"]["kind"] for d in built) == sorted(CRD_KINDS)


# --- what users write validates ---------------------------------------------------------


def json_schema(node: dict) -> dict:
    """A structural schema as JSON Schema, with the API server's readings: ``nullable``
    admits null; int-or-string is either; preserve-unknown-fields keeps anything; any
    object with properties refuses unknown fields (pruned by the API server, refused by
    ``kubectl apply``'s strict field validation); ``metadata``, an object without
    properties, is the API server's ObjectMeta."""
    if node.get("x-kubernetes-int-or-string"):
        out: dict = {"anyOf": [{"type": "integer"}, {"type": "string"}]}
    elif "type" not in node:
        out = {}
    else:
        out = {"type": [node["type"], "null"] if node.get("nullable") else node["type"]}
    for key in ("enum", "format", "minimum", "maximum", "pattern"):
        if key in node:
            out[key] = node[key]
    if "properties" in node:
        out["properties"] = {k: json_schema(v) for k, v in node["properties"].items()}
    if "items" in node:
        out["items"] = json_schema(node["items"])
    if "additionalProperties" in node:
        out["additionalProperties"] = json_schema(node["additionalProperties"])
    elif "properties" in node and not node.get("x-kubernetes-preserve-unknown-fields"):
        out["additionalProperties"] = False
    if node.get("required"):
        out["required"] = node["required"]
    return out


def fixture_objects() -> list[tuple[str, dict]]:
    out = []
    for path in sorted(FIXTURES.glob("*.yaml")):
        for i, obj in enumerate(yaml.safe_load(path.read_text()).get("objects", [])):
            if obj.get("apiVersion") == "traefik.io/v1alpha1":
                name = f"{path.stem}#{i} {obj['kind']}/{obj['metadata']['name']}"
                out.append((name, obj))
    return out


def validator(kind: str):
    jsonschema = pytest.importorskip("jsonschema", reason="jsonschema not installed")
    schema = json_schema(root_schema(crds()[kind]))
    return jsonschema.Draft202012Validator(schema)


def test_every_kind_has_a_fixture():
    assert {obj["kind"] for _, obj in fixture_objects()} >= {
        "IngressRoute",
        "IngressRouteTCP",
        "IngressRouteUDP",
        "Middleware",
    }


@pytest.mark.parametrize(
    "obj", [o for _, o in fixture_objects()], ids=[n for n, _ in fixture_objects()]
)
def test_fixture_object_validates(obj):
    errors = [
        f"{'.'.join(map(str, e.absolute_path))}: {e.message}"
        for e in validator(obj["kind"]).iter_errors(obj)
    ]
    assert not errors, "\n".join(errors)


def test_validation_can_fail():
    route = {
        "apiVersion": "traefik.io/v1alpha1",
        "kind": "IngressRoute",
        "metadata": {"name": "web", "namespace": "default"},
        "spec": {"routes": [{"match": "Host(`a`)", "services": [{"name": "web", "port": 80}]}]},
    }
    check = validator("IngressRoute")
    assert check.is_valid(route)
    named = yaml.safe_load(yaml.safe_dump(route))
    named["spec"]["routes"][0]["services"][0]["port"] = "http"
    assert check.is_valid(named)
    for key, value in [("port", [80]), ("weight", "heavy"), ("prot", 80)]:
        bad = yaml.safe_load(yaml.safe_dump(route))
        bad["spec"]["routes"][0]["services"][0][key] = value
        assert not check.is_valid(bad), key
    assert not check.is_valid({k: v for k, v in route.items() if k != "spec"})
