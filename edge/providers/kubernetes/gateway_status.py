"""The status the Gateway provider writes: what a write holds, and whether one is needed.

Owns :func:`status_patch`: from the status an object holds and the status the
conversion wants (:class:`~edge.providers.kubernetes.gateway.WantedStatus`), the
``status`` to write with a JSON merge patch, or None when the object already holds it.
Pure, so table-tested; the provider's status thread does the writing
(:mod:`edge.providers.kubernetes.gateway_provider`).

Invariants:

- A condition keeps its ``lastTransitionTime`` while its ``status`` stays the same
  (the spec's meaning of the field); one that changed, or is new, gets ``now``.
- Only what edge owns is written: a GatewayClass's and a Gateway's ``conditions``, a
  Gateway's ``listeners`` (a merge patch leaves ``addresses`` alone), and in a route's
  ``parents`` the entries whose ``controllerName`` is edge's: other controllers'
  entries are written back as they are, in their place.
- Equal means equal as JSON builtins, so a write that would change nothing is never
  made: with several edge pods converting the same objects, the first write makes
  the others' comparisons equal, and they skip theirs.
"""

from __future__ import annotations

from typing import Any

from edge.providers.kubernetes.gateway import WantedStatus

__all__ = ["merge_conditions", "status_patch"]


def merge_conditions(current: Any, wanted: list[dict[str, Any]], now: str) -> list[dict[str, Any]]:
    """``wanted`` with each condition's ``lastTransitionTime``: the current one's while
    the condition of that type keeps its status, else ``now``."""
    held = {c.get("type"): c for c in current or () if isinstance(c, dict)}
    out = []
    for cond in wanted:
        old = held.get(cond["type"])
        since = now
        if old is not None and old.get("status") == cond["status"]:
            since = old.get("lastTransitionTime") or now
        out.append({**cond, "lastTransitionTime": since})
    return out


def _listeners(current: Any, wanted: list[dict[str, Any]], now: str) -> list[dict[str, Any]]:
    held = {li.get("name"): li for li in current or () if isinstance(li, dict)}
    return [
        {
            **li,
            "conditions": merge_conditions(
                (held.get(li["name"]) or {}).get("conditions"), li["conditions"], now
            ),
        }
        for li in wanted
    ]


def _same_parent(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Two parentRefs naming the same parent (defaults filled in as the API does)."""

    def norm(ref: dict[str, Any]) -> tuple[Any, ...]:
        return (
            ref.get("group", "gateway.networking.k8s.io"),
            ref.get("kind", "Gateway"),
            ref.get("namespace"),
            ref.get("name"),
            ref.get("sectionName"),
            ref.get("port"),
        )

    return norm(a) == norm(b)


def _parents(
    current: Any, wanted: list[dict[str, Any]], controller: str, now: str
) -> list[dict[str, Any]]:
    """Other controllers' entries as they are, then edge's (its conditions merged with
    the entry it wrote before for the same parentRef)."""
    held = [p for p in current or () if isinstance(p, dict)]
    others = [p for p in held if p.get("controllerName") != controller]
    mine = [p for p in held if p.get("controllerName") == controller]
    out = list(others)
    for entry in wanted:
        before = next(
            (p for p in mine if _same_parent(p.get("parentRef", {}), entry["parentRef"])), {}
        )
        out.append(
            {
                **entry,
                "conditions": merge_conditions(before.get("conditions"), entry["conditions"], now),
            }
        )
    return out


def status_patch(
    current: dict[str, Any], wanted: WantedStatus, controller: str, now: str
) -> dict[str, Any] | None:
    """The ``status`` to merge-patch onto an object holding ``current``, or None when
    it holds what edge wants already (see the module doc)."""
    new: dict[str, Any] = {}
    for field, value in wanted.status.items():
        held = current.get(field)
        if field == "conditions":
            new[field] = merge_conditions(held, value, now)
        elif field == "listeners":
            new[field] = _listeners(held, value, now)
        elif field == "parents":
            new[field] = _parents(held, value, controller, now)
        else:
            new[field] = value
    if all(current.get(field) == value for field, value in new.items()):
        return None
    return new
