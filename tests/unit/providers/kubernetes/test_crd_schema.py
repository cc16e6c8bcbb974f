"""msgspec's JSON Schema -> Kubernetes' structural dialect, and the CRDs built with it.

Pure: small models and hand-written schemas through :func:`structural`, then edge's own
kinds through :func:`crd`. The files in k8s/crds/ and their validation by Kubernetes'
rules are tests/deploy/test_crds.py.
"""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from edge.providers.kubernetes import crd_schema
from edge.providers.kubernetes.crd_schema import crd, files, spec_schema, structural
from edge.providers.kubernetes.objects import CRD_KINDS


class Ref(msgspec.Struct, frozen=True, rename="camel"):
    """A reference, by ``name``."""

    name: str = ""


class Spec(msgspec.Struct, frozen=True, rename="camel"):
    port: int | str = 0
    weight: int | None = None
    ref: Ref | None = None
    refs: list[Ref] = []
    labels: dict[str, str] = {}
    free: dict[str, Any] = {}
    anything: Any = None
    things: list[Any] = []
    service_name: str = ""


class Kind(msgspec.Struct):
    spec: Spec = Spec()


def of(model: type) -> dict[str, Any]:
    (top,), defs = msgspec.json.schema_components([model], ref_template="#/$defs/{name}")
    return structural(top, defs)


def test_model_to_structural():
    spec = of(Kind)["properties"]["spec"]
    assert spec == {
        "type": "object",
        "properties": {
            "port": {"x-kubernetes-int-or-string": True},
            "weight": {"type": "integer", "nullable": True},
            "ref": {
                "description": "A reference, by `name`.",
                "type": "object",
                "properties": {"name": {"type": "string"}},
                "nullable": True,
            },
            "refs": {
                "type": "array",
                "items": {
                    "description": "A reference, by `name`.",
                    "type": "object",
                    "properties": {"name": {"type": "string"}},
                },
            },
            "labels": {"type": "object", "additionalProperties": {"type": "string"}},
            "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
            "anything": {"x-kubernetes-preserve-unknown-fields": True},
            "things": {"type": "array", "items": {"x-kubernetes-preserve-unknown-fields": True}},
            "serviceName": {"type": "string"},
        },
    }


def test_nothing_structural_forbids_survives():
    def walk(node: Any) -> None:
        if isinstance(node, dict):
            assert not {"$ref", "$defs", "anyOf", "title", "default"} & set(node), node
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(of(Kind))
    for kind in CRD_KINDS:
        walk(crd(kind))


def test_required_kept_empty_dropped():
    node = {"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]}
    assert structural(node, {})["required"] == ["a"]
    assert "required" not in structural({**node, "required": []}, {})


@pytest.mark.parametrize(
    ("schema", "message"),
    [
        ({"anyOf": [{"type": "string"}, {"type": "boolean"}]}, "a union"),
        ({"anyOf": [{"$ref": "#/$defs/A"}, {"$ref": "#/$defs/B"}]}, "a union"),
        ({"$ref": "#/$defs/Missing"}, "unresolved reference"),
        ({"type": ["string", "null"]}, "no single type"),
        ({"type": "string", "contentEncoding": "base64"}, "contentEncoding"),
        ({"type": "object", "additionalProperties": 3}, "additionalProperties"),
    ],
)
def test_shapes_a_crd_cannot_hold_are_refused(schema, message):
    defs = {"A": {"type": "object"}, "B": {"type": "object"}}
    with pytest.raises(ValueError, match=message):
        structural({"type": "object", "properties": {"x": schema}}, defs)


def test_refusal_names_the_path():
    node = {"type": "object", "properties": {"a": {"type": "array", "items": {"type": ["x"]}}}}
    with pytest.raises(ValueError, match=r"^\$\.a\[\]: "):
        structural(node, {})


def test_recursive_model_is_refused():
    defs = {"Node": {"type": "object", "properties": {"child": {"$ref": "#/$defs/Node"}}}}
    with pytest.raises(ValueError, match="recursive"):
        structural({"$ref": "#/$defs/Node"}, defs)


@pytest.mark.parametrize("kind", sorted(CRD_KINDS))
def test_crd_names_and_version(kind):
    doc = crd(kind)
    spec = doc["spec"]
    plural = kind.lower() + "s"
    assert doc["metadata"]["name"] == f"{plural}.traefik.io"
    assert spec["group"] == "traefik.io" and spec["scope"] == "Namespaced"
    assert spec["names"] == {
        "kind": kind,
        "listKind": f"{kind}List",
        "plural": plural,
        "singular": kind.lower(),
    }
    (version,) = spec["versions"]
    assert (version["name"], version["served"], version["storage"]) == ("v1alpha1", True, True)
    root = version["schema"]["openAPIV3Schema"]
    assert root["properties"]["metadata"] == {"type": "object"}
    assert root["properties"]["spec"] == spec_schema(kind)


def test_traefik_names():
    assert crd_schema.NAMES["IngressRouteTCP"] == ("ingressroutetcps", "ingressroutetcp")
    assert crd_schema.NAMES["ServersTransportTCP"] == (
        "serverstransporttcps",
        "serverstransporttcp",
    )
    assert crd_schema.NAMES["TLSOption"] == ("tlsoptions", "tlsoption")


def test_free_specs_and_ports():
    assert spec_schema("Middleware") == {
        "type": "object",
        "x-kubernetes-preserve-unknown-fields": True,
    }
    route = spec_schema("IngressRoute")["properties"]["routes"]["items"]
    service = route["properties"]["services"]["items"]["properties"]
    assert service["port"] == {"x-kubernetes-int-or-string": True}
    udp = spec_schema("IngressRouteUDP")["properties"]["routes"]["items"]["properties"]
    assert udp["services"]["items"]["properties"]["port"] == {"x-kubernetes-int-or-string": True}
    tls = spec_schema("IngressRouteTCP")["properties"]["tls"]
    assert tls["nullable"] is True and tls["properties"]["passthrough"] == {"type": "boolean"}


def test_files_are_deterministic_and_listed():
    out = files()
    assert out == files()
    assert len(out) == len(CRD_KINDS) + 1
    assert "traefik.io_ingressroutes.yaml" in out
    assert all(name in out["kustomization.yaml"] for name in out if name != "kustomization.yaml")


def test_write_then_check(tmp_path):
    (tmp_path / "traefik.io_gone.yaml").write_text("old\n")
    crd_schema.write(tmp_path)
    assert not (tmp_path / "traefik.io_gone.yaml").exists()
    assert crd_schema.check(tmp_path) == []
    (tmp_path / "traefik.io_middlewares.yaml").write_text("edited\n")
    (tmp_path / "extra.yaml").write_text("{}\n")
    (tmp_path / "traefik.io_tlsstores.yaml").unlink()
    assert crd_schema.check(tmp_path) == [
        "traefik.io_tlsstores.yaml: missing",
        "extra.yaml: not generated (remove it)",
        "traefik.io_middlewares.yaml: stale",
    ]
    assert crd_schema.main(["--check", str(tmp_path)]) == 1
    assert crd_schema.main(["--write", str(tmp_path / "new")]) == 0
    assert crd_schema.main(["--check", str(tmp_path / "new")]) == 0
