"""Traefik's CustomResourceDefinitions, generated from edge's models of its kinds.

Owns the CRD manifests in ``k8s/crds/``: one CustomResourceDefinition per kind of
:data:`~edge.providers.kubernetes.objects.CRD_KINDS` (group ``traefik.io``, version
``v1alpha1``, served and stored, namespaced, Traefik's plural and singular names), whose
``spec`` schema is :func:`msgspec.json.schema_components` of edge's model turned into
Kubernetes' *structural* dialect by :func:`structural`, and the ``kustomization.yaml``
that lists them. Regenerate after changing a model::

    python -m edge.providers.kubernetes.crd_schema --write k8s/crds
    python -m edge.providers.kubernetes.crd_schema --check k8s/crds   # exit 1 when stale

Invariants: the output is a pure function of the models (same models, same bytes);
every schema node has a ``type`` or is ``x-kubernetes-int-or-string`` or
``x-kubernetes-preserve-unknown-fields``; no ``$ref``, ``$defs``, ``anyOf``, ``title``
or ``default`` survives (the API server would apply a default; edge's defaults live in
its models). A model field of a shape this transform does not know is a
:class:`ValueError` naming its path, never a silently wrong schema.

Control plane only: nothing in edge imports this module; the tests and the command do.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import msgspec
import yaml

from edge.providers.kubernetes.objects import CRD_KINDS

__all__ = [
    "GROUP",
    "NAMES",
    "VERSION",
    "check",
    "crd",
    "files",
    "main",
    "spec_schema",
    "structural",
    "write",
]

GROUP = "traefik.io"
VERSION = "v1alpha1"

NAMES: Mapping[str, tuple[str, str]] = {
    kind: (kind.lower() + "s", kind.lower()) for kind in CRD_KINDS
}
"""kind -> (plural, singular), as Traefik's CRDs name them (``ingressroutetcps``...)."""

HEADER = (
    "# Generated from edge's models (edge/providers/kubernetes/objects.py) by\n"
    "#   python -m edge.providers.kubernetes.crd_schema --write k8s/crds\n"
    "# Do not edit: tests/deploy/test_crds.py fails when this file is stale.\n"
)

# Keys copied as they are from msgspec's schema into a structural one.
_KEPT = ("type", "format", "enum", "minimum", "maximum", "minLength", "maxLength", "pattern")
# Keys msgspec writes that a CRD must not hold (or need not: titles repeat the kind).
_DROPPED = ("title", "default", "examples")
_REF = re.compile(r"^#/\$defs/(?P<name>.+)$")


def structural(node: Mapping[str, Any], defs: Mapping[str, Any], path: str = "$") -> dict[str, Any]:
    """``node``, a JSON Schema msgspec wrote (``$ref`` into ``defs``), as a Kubernetes
    structural schema: references inlined; ``X | None`` as ``X`` with ``nullable``;
    ``int | str`` as ``x-kubernetes-int-or-string``; ``Any`` (an empty schema) and
    ``dict[str, Any]`` as ``x-kubernetes-preserve-unknown-fields``; descriptions on one
    line. Raises :class:`ValueError` naming ``path`` for any other shape (a union of
    two models, a recursive model...)."""
    return _structural(node, defs, path, ())


def _line(text: str) -> str:
    """A docstring as one line of plain text (reST's double backquotes made single)."""
    return " ".join(text.replace("``", "`").split())


def _structural(
    node: Mapping[str, Any], defs: Mapping[str, Any], path: str, seen: tuple[str, ...]
) -> dict[str, Any]:
    if "$ref" in node:
        match = _REF.match(node["$ref"])
        if match is None or match["name"] not in defs:
            raise ValueError(f"{path}: unresolved reference {node['$ref']!r}")
        name = match["name"]
        if name in seen:
            raise ValueError(f"{path}: {name} is recursive; a structural schema cannot say so")
        rest = {k: v for k, v in node.items() if k != "$ref"}
        return _structural({**defs[name], **rest}, defs, path, (*seen, name))
    if "anyOf" in node:
        return _union(node, defs, path, seen)

    out: dict[str, Any] = {}
    if description := node.get("description"):
        out["description"] = _line(description)
    if not set(node) - {"description", *_DROPPED}:  # Any: whatever the user writes is kept
        out["x-kubernetes-preserve-unknown-fields"] = True
        return out
    unknown = set(node) - {*_KEPT, *_DROPPED, "description", "properties", "items",
                           "additionalProperties", "required"}  # fmt: skip
    if unknown:
        raise ValueError(f"{path}: schema keys a CRD cannot hold: {sorted(unknown)}")
    if not isinstance(node.get("type"), str):
        raise ValueError(f"{path}: no single type: {node.get('type')!r}")
    out.update((k, node[k]) for k in _KEPT if k in node)
    if "properties" in node:
        out["properties"] = {
            key: _structural(value, defs, f"{path}.{key}", seen)
            for key, value in node["properties"].items()
        }
    if node.get("required"):
        out["required"] = list(node["required"])
    if "items" in node:
        out["items"] = _structural(node["items"], defs, f"{path}[]", seen)
    elif out["type"] == "array":  # list[Any]: items of any shape
        out["items"] = {"x-kubernetes-preserve-unknown-fields": True}
    values = node.get("additionalProperties", {})
    if out["type"] == "object" and "properties" not in node and values in ({}, True):
        out["x-kubernetes-preserve-unknown-fields"] = True  # dict[str, Any]: free data
    elif isinstance(values, Mapping) and values:
        out["additionalProperties"] = _structural(values, defs, f"{path}.*", seen)
    elif values not in ({}, False):
        raise ValueError(f"{path}: additionalProperties {values!r}")
    return out


def _union(
    node: Mapping[str, Any], defs: Mapping[str, Any], path: str, seen: tuple[str, ...]
) -> dict[str, Any]:
    branches = list(node["anyOf"])
    nullable = {"type": "null"} in branches
    others = [b for b in branches if b != {"type": "null"}]
    rest = {k: v for k, v in node.items() if k not in ("anyOf", *_DROPPED)}
    types = sorted(b.get("type", "") for b in others if set(b) == {"type"})
    if types == ["integer", "string"] and len(others) == 2:
        out: dict[str, Any] = {"x-kubernetes-int-or-string": True}
    elif len(others) == 1:
        out = _structural({**others[0], **rest}, defs, path, seen)
        rest = {}
    else:
        raise ValueError(f"{path}: a union a structural schema cannot hold: {branches!r}")
    if rest.get("description"):
        out["description"] = _line(rest["description"])
    if nullable:
        out["nullable"] = True
    return out


def spec_schema(kind: str) -> dict[str, Any]:
    """The structural schema of ``spec`` of ``kind``'s model."""
    model = CRD_KINDS[kind]
    (top,), defs = msgspec.json.schema_components([model], ref_template="#/$defs/{name}")
    resolved = structural(top, defs)
    try:
        return dict(resolved["properties"]["spec"])
    except KeyError:
        raise ValueError(f"{kind}: the model has no spec") from None


def crd(kind: str) -> dict[str, Any]:
    """The CustomResourceDefinition of ``kind`` (one of :data:`CRD_KINDS`)."""
    plural, singular = NAMES[kind]
    description = _line(CRD_KINDS[kind].__doc__ or "")
    root: dict[str, Any] = {
        "description": description or f"{kind} ({GROUP}/{VERSION}), as edge reads it.",
        "type": "object",
        "properties": {
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            "metadata": {"type": "object"},
            "spec": spec_schema(kind),
        },
        "required": ["metadata", "spec"],
    }
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{GROUP}"},
        "spec": {
            "group": GROUP,
            "names": {
                "kind": kind,
                "listKind": f"{kind}List",
                "plural": plural,
                "singular": singular,
            },
            "scope": "Namespaced",
            "versions": [
                {
                    "name": VERSION,
                    "served": True,
                    "storage": True,
                    "schema": {"openAPIV3Schema": root},
                }
            ],
        },
    }


def _dump(doc: Mapping[str, Any]) -> str:
    return yaml.safe_dump(dict(doc), sort_keys=False, default_flow_style=False, width=1_000_000)


def files() -> dict[str, str]:
    """File name -> text: one ``traefik.io_<plural>.yaml`` per kind (Traefik's file
    names) and the ``kustomization.yaml`` listing them."""
    out = {
        f"{GROUP}_{NAMES[kind][0]}.yaml": HEADER + "---\n" + _dump(crd(kind))
        for kind in sorted(CRD_KINDS)
    }
    kustomization = {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "resources": sorted(out),
    }
    out["kustomization.yaml"] = HEADER + _dump(kustomization)
    return out


def write(directory: Path) -> list[Path]:
    """Write :func:`files` into ``directory``, removing stale ``traefik.io_*.yaml``;
    returns the paths written."""
    directory.mkdir(parents=True, exist_ok=True)
    wanted = files()
    for old in directory.glob(f"{GROUP}_*.yaml"):
        if old.name not in wanted:
            old.unlink()
    written = []
    for name, text in wanted.items():
        (directory / name).write_text(text)
        written.append(directory / name)
    return written


def check(directory: Path) -> list[str]:
    """What differs between ``directory`` and :func:`files`: one line per stale,
    missing or extra file; empty when up to date."""
    wanted = files()
    present = {p.name for p in directory.glob("*.yaml")}
    problems = [f"{name}: missing" for name in sorted(set(wanted) - present)]
    problems += [f"{name}: not generated (remove it)" for name in sorted(present - set(wanted))]
    problems += [
        f"{name}: stale"
        for name in sorted(set(wanted) & present)
        if (directory / name).read_text() != wanted[name]
    ]
    return problems


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m edge.providers.kubernetes.crd_schema",
        description="Generate k8s/crds/ (Traefik's CRDs) from edge's models.",
    )
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--write", type=Path, metavar="DIR", help="write the CRDs into DIR")
    mode.add_argument("--check", type=Path, metavar="DIR", help="exit 1 if DIR is stale")
    args = parser.parse_args(argv)
    if args.write is not None:
        for path in write(args.write):
            print(path)
        return 0
    problems = check(args.check)
    for line in problems:
        print(f"{args.check}/{line}", file=sys.stderr)
    if problems:
        print(f"regenerate: {parser.prog} --write {args.check}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
