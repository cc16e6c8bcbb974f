"""The rule language: Traefik's router rules, compiled once, and a host-indexed route table.

Owns the grammar, the matchers of both syntaxes Traefik v3 reads (``v3``, its own, and
``v2``, kept for migration: ``ruleSyntax`` on a router, ``core.defaultRuleSyntax``),
the request view matchers read, the one host normalisation (:func:`split_authority`)
and :class:`RouteTable`, which picks the winning route.

The grammar is :mod:`edge.rules.parser`'s docstring.

Meaning, as Traefik v3 (up to v3.7) gives it:

* ``v3``: every matcher takes one value (``Header``, ``HeaderRegexp``: two; ``Query``,
  ``QueryRegexp``: one or two); no value may be empty. ``Host(`*.a.com`)`` matches one
  label under ``a.com``, ``Host(`*`)`` any host. ``{name:re}`` is not a template: the
  braces are literal regexp text.
* ``v2``: matchers take several values (any of them), ``Headers``/``Query`` take
  key/value pairs (all of them); ``HostRegexp``, ``Path``, ``PathPrefix`` and the
  ``Query`` values are gorilla/mux templates (``{name}``, ``{name:re}``).
* Paths are matched on the *routing path*: the request path with percent-encoded
  reserved characters (RFC 3986 gen-delims, sub-delims and ``%``) kept encoded, in
  upper case, and every other escape decoded, so ``Path(`/a/b`)`` never matches
  ``/a%2Fb``. What goes upstream is the client's path, untouched.
* Regexps are RE2's (Go's ``regexp`` syntax: no backreferences, no lookaround), run
  by the RE2 library: linear in the input, so no rule can stall the event loop.
  ``HostRegexp`` reads the lowercased host and is case-sensitive (write ``(?i)``).

Invariants:

* A rule is parsed, validated and its regexps and networks compiled exactly once, in
  :func:`compile_rule`. Matching never parses or compiles; the only per-request work
  beyond comparisons is the request view's lazily cached query map, routing path and
  parsed client address.
* ``Rule.hosts`` is sound: when it is a set of keys (host names, or ``*.suffix``
  wildcards), every request the rule matches has a host (tcp rules: SNI) that is a
  key or whose :func:`wildcard_of` is one. :class:`RouteTable` relies on it to skip
  routes that cannot match, so its answer is always that of a linear scan over all
  entries in priority order.
* Every problem with a rule is a :class:`~edge.errors.RuleError` naming the rule and
  the 1-based column (character offset into the rule text) of the offending token.

Modules, the way Traefik splits ``pkg/muxer/http`` (lowest first; none imports this
package, so it re-exports without a cycle):

* :mod:`~edge.rules.hosts`: :func:`split_authority`, :func:`canonical_host`,
  :func:`wildcard_of`.
* :mod:`~edge.rules.request`: :class:`RequestView`, :func:`routing_path`, the query.
* :mod:`~edge.rules.lexer`: tokens; :mod:`~edge.rules.parser`: the grammar's parser.
* :mod:`~edge.rules.regexp`: RE2 and gorilla/mux templates;
  :mod:`~edge.rules.nodes`: the matcher nodes and the host analysis the index uses.
* :mod:`~edge.rules.arguments`: argument checks shared by :mod:`~edge.rules.v3` and
  :mod:`~edge.rules.v2`, the matchers of each syntax.
* :mod:`~edge.rules.rule`: :class:`Rule`, :func:`compile_rule`, :class:`RuleCompiler`.
* :mod:`~edge.rules.table`: :class:`RouteTable`.

Names starting with ``_`` are the package's own: its modules share them, nothing
outside imports them.
"""

from edge.rules.hosts import canonical_host, split_authority, wildcard_of
from edge.rules.nodes import unmapped_network
from edge.rules.request import RequestView, routing_path
from edge.rules.rule import SYNTAXES, Rule, RuleCompiler, compile_rule, default_priority
from edge.rules.table import RouteTable

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
