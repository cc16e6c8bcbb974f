"""The checks the protocols' walks share: a router's rule, entry points, service,
middlewares and TLS options; a service's serversTransport; weighted services.

Each records what it finds on the info it is given (:meth:`ElementInfo.add_error`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from edge.config.dynamic import (
    UNSUPPORTED,
    HighestRandomWeight,
    HRWService,
    TLSOptions,
    Weighted,
    WRRService,
)
from edge.config.runtime.model import (
    DEFAULT_TRANSPORT,
    DISABLED,
    RouterInfo,
    RuntimeConfig,
    ServiceInfo,
)
from edge.config.static import API_SERVICE, PROMETHEUS_SERVICE
from edge.errors import RuleError
from edge.rules import SYNTAXES, Rule, RuleCompiler, default_priority


class _RuleCache:
    """Compiled rules of the previous snapshot, by (kind, syntax, text), and the default syntax."""

    def __init__(self, previous: RuntimeConfig | None, default_syntax: str) -> None:
        if default_syntax not in SYNTAXES:
            raise ValueError(f"unknown default rule syntax {default_syntax!r}")
        self.default_syntax = default_syntax
        self._rules: dict[tuple[str, str, str], Rule] = {}
        self._compiler = RuleCompiler()
        if previous is not None:
            for table in (previous.http_routers, previous.tcp_routers):
                for info in table.values():
                    rule = info.rule
                    if rule is not None:
                        self._rules[(rule.kind, rule.syntax, rule.text)] = rule

    def compile(self, text: str, kind: str, syntax: str) -> Rule:
        rule = self._rules.get((kind, syntax, text))
        if rule is None:
            # Rules written alike (a provider's thousands) share one parse.
            rule = self._rules[(kind, syntax, text)] = self._compiler.compile(
                text, kind=kind, syntax=syntax
            )
        return rule


def _check_rule(r: RouterInfo[Any], text: str, kind: str, rules: _RuleCache) -> None:
    r.priority = r.config.priority or default_priority(text)
    syntax = r.config.rule_syntax or rules.default_syntax
    if syntax not in SYNTAXES:
        r.add_error(f"ruleSyntax {syntax!r}: expected one of {', '.join(SYNTAXES)}")
        return
    r.rule_syntax = syntax
    try:
        r.rule = rules.compile(text, kind, syntax)
    except RuleError as exc:
        r.add_error(f"{exc} (rule syntax {syntax})" if syntax != "v3" else str(exc))
        return
    if kind == "tcp" and not r.config.priority and r.rule.catch_all:
        # Traefik's GetRulePriority: a HostSNI(`*`) router comes after every router
        # whose priority is its rule's length (ALPN(`h2`) is 10 long, HostSNI(`*`) 12).
        r.priority = -1


def _check_entry_points(
    r: RouterInfo[Any],
    configured: list[str],
    protocol: str,
    defaults: list[str],
    entry_points: Mapping[str, str],
) -> None:
    if not configured:
        r.entry_points = list(defaults)
        if not defaults:
            r.add_error(f"no {protocol.upper()} entry point to attach to")
        return
    for ep in configured:
        actual = entry_points.get(ep)
        if actual is None:
            r.add_error(f"entryPoint {ep!r} does not exist")
        elif actual != protocol:
            r.add_error(
                f"entryPoint {ep!r} is a {actual.upper()} entry point, not {protocol.upper()}"
            )
        elif ep not in r.entry_points:
            r.entry_points.append(ep)


def _check_service(
    r: RouterInfo[Any], service: str, services: Mapping[str, ServiceInfo[Any]]
) -> None:
    info = services.get(service)
    if info is None:
        hint = {
            API_SERVICE: " (it exists when the static configuration has `api`)",
            PROMETHEUS_SERVICE: " (it exists with `metrics.prometheus.manualRouting`)",
        }.get(service, "")
        r.add_error(f"service {service!r} does not exist{hint}")
        return
    if r.name not in info.used_by:
        info.used_by.append(r.name)
    if info.status == DISABLED:
        r.add_error(f"service {service!r} is disabled: {'; '.join(info.errors)}")


def _check_references(
    r: RouterInfo[Any],
    services: Mapping[str, ServiceInfo[Any]],
    middlewares: Mapping[str, ServiceInfo[Any]],
    tls_options: Mapping[str, TLSOptions],
    options: str | None,
    origins: Mapping[str, str] | None = None,
) -> None:
    """What an HTTP or TCP router names: its service, its middlewares and, when it
    terminates TLS, its TLS ``options``: each exists and is not disabled (a message
    about a middleware ends with its ``origins`` entry, where it has one: one its
    entry point put there). A
    ``tls.certResolver`` is a warning: edge has none (no ACME), and, as Traefik does
    with a resolver it does not have, serves the router with the certificates it has."""
    _check_service(r, r.config.service, services)
    resolver = getattr(r.config.tls, "cert_resolver", "")
    if resolver and not getattr(r.config.tls, "passthrough", False):
        r.add_error(
            f"tls.certResolver {resolver!r} does not exist (edge has no certificate resolvers, "
            "no ACME): served with tls.certificates, else the default certificate",
            critical=False,
        )
    for mw in r.config.middlewares:
        m = middlewares.get(mw)
        origin = origins.get(mw, "") if origins else ""
        if m is None:
            r.add_error(f"middleware {mw!r}{origin} does not exist")
            continue
        if r.name not in m.used_by:
            m.used_by.append(r.name)
        if m.status == DISABLED:
            r.add_error(f"middleware {mw!r}{origin} is disabled: {'; '.join(m.errors)}")
    if options is not None:
        if options not in tls_options:
            r.add_error(f"TLS options {options!r} do not exist")
        else:
            _check_options(r, options, tls_options[options])


def _check_transport(info: ServiceInfo[Any], name: str, transports: Mapping[str, object]) -> bool:
    """A service's serversTransport (``name``, ``""`` for the default) exists and is
    usable: no Traefik option edge lacks, no key error (``problems``, the loader's
    stand-in). Returns whether its other settings are worth checking (it exists and
    has no problems)."""
    transport = name or DEFAULT_TRANSPORT
    if transport not in transports:
        info.add_error(f"serversTransport {transport!r} does not exist")
        return False
    unsupported = getattr(transports[transport], "unsupported", ())
    if unsupported:
        info.add_error(f"serversTransport {transport!r}: {', '.join(unsupported)}: {UNSUPPORTED}")
    problems = getattr(transports[transport], "problems", ())
    if problems:
        info.add_error(f"serversTransport {transport!r} is disabled: {'; '.join(problems)}")
    return not problems


def _check_options(r: RouterInfo[Any], name: str, options: TLSOptions) -> None:
    if options.unsupported:
        r.add_error(f"TLS options {name!r}: {', '.join(options.unsupported)}: {UNSUPPORTED}")
    if options.problems:
        r.add_error(f"TLS options {name!r} are disabled: {'; '.join(options.problems)}")


def _check_weighted(services: Mapping[str, ServiceInfo[Any]], answers: bool = False) -> None:
    """Disable weighted services with a missing, disabled or cyclic member.

    Depth-first over the weighted graph, so a member's status is final before the
    services referring to it are judged. Every service on a cycle gets the cycle's message.
    A member with a ``status`` is an answer, not a service (HTTP only: ``answers``).
    """
    visiting: list[str] = []
    done: set[str] = set()
    cycle_peers: dict[str, set[str]] = {}

    def visit(name: str) -> None:
        info = services[name]
        # A stand-in (a key error: its problems disable it) has no members to judge.
        config = info.config
        # highestRandomWeight (HTTP's) has members as weighted has, without a status.
        weighted: Weighted | HighestRandomWeight | None = (
            None
            if config.problems
            else config.weighted or getattr(config, "highest_random_weight", None)
        )
        visiting.append(name)
        members: Sequence[WRRService | HRWService] = [] if weighted is None else weighted.services
        for i, wrr in enumerate(members):
            member = wrr.name
            if getattr(wrr, "status", None) is not None:
                if not answers:
                    info.add_error(f"weighted.services[{i}].status: only HTTP members answer")
                continue
            child = services.get(member)
            if child is None:
                info.add_error(f"service {member!r} does not exist")
                continue
            if name not in child.used_by:
                child.used_by.append(name)
            if member in visiting:
                cycle = [*visiting[visiting.index(member) :], member]
                message = "weighted services form a cycle: " + " -> ".join(cycle)
                for peer in cycle[:-1]:
                    cycle_peers.setdefault(peer, set()).update(cycle)
                    if message not in services[peer].errors:
                        services[peer].add_error(message)
                continue
            if member not in done:
                visit(member)
            if child.status == DISABLED and member not in cycle_peers.get(name, ()):
                info.add_error(f"service {member!r} is disabled")
        visiting.pop()
        done.add(name)
        if weighted is not None and not weighted.services:
            info.add_error("no services: requests get 503", critical=False)

    for name in services:
        if name not in done:
            visit(name)
    visit = None  # type: ignore[assignment]  # it referred to itself: a cycle holding the snapshot
