"""The rule language: Traefik's router rules, compiled once, and a host-indexed route table.

The package's API is what this module re-exports; see :mod:`edge.rules.parser`.
"""

from edge.rules.parser import (
    SYNTAXES,
    RequestView,
    RouteTable,
    Rule,
    RuleCompiler,
    canonical_host,
    compile_rule,
    default_priority,
    routing_path,
    split_authority,
    unmapped_network,
    wildcard_of,
)

__all__ = [
    "SYNTAXES",
    "RequestView",
    "RouteTable",
    "Rule",
    "RuleCompiler",
    "canonical_host",
    "compile_rule",
    "default_priority",
    "routing_path",
    "split_authority",
    "unmapped_network",
    "wildcard_of",
]
