"""Traefik v2's matchers, kept for migration (``ruleSyntax: v2`` on a router,
``core.defaultRuleSyntax``): several values each, any of them; ``Headers``,
``HeadersRegexp`` and ``Query`` take pairs, all of them; ``HostRegexp``, ``Path``,
``PathPrefix`` and the ``Query`` values are gorilla/mux templates.
"""

from __future__ import annotations

import re
from typing import Any, Final

from edge.rules.arguments import (
    _BOTH,
    _HTTP,
    _MANY,
    _TCP,
    _alpn,
    _ascii,
    _header_name,
    _host_key,
    _network,
    _path_value,
    _sni_key,
    _Spec,
)
from edge.rules.lexer import _Fail, _Token
from edge.rules.nodes import (
    _ALPN,
    _Always,
    _And,
    _ClientIP,
    _Header,
    _Host,
    _Method,
    _Or,
    _Path,
    _PathPrefix,
    _PathRegexp,
    _QueryTemplate,
    _Regexp,
    _ValuesRegexp,
)
from edge.rules.regexp import _RE2, _compile_re2, _regexp, _template

_SNI_V2_RE: Final = re.compile(r"[0-9A-Za-z_.:-]+", re.ASCII)


def _v2_host(args: list[_Token]) -> Any:
    return _Host("host", frozenset(_host_key(a, wildcard=False) for a in args))


def _v2_host_regexp(args: list[_Token]) -> Any:
    for arg in args:
        _ascii(arg, "HostRegexp")
    return _Regexp(
        "host", [_template(a, "[^.]+", host=True, prefix=False, query=False) for a in args]
    )


def _v2_paths(args: list[_Token], *, prefix: bool) -> Any:
    literal: list[str] = []
    templates: list[_RE2] = []
    for arg in args:
        _path_value(arg)
        if "{" in arg.value or "}" in arg.value:
            templates.append(_template(arg, "[^/]+", host=False, prefix=prefix, query=False))
        else:  # a template without variables: its quoted, anchored text is a plain compare
            literal.append(arg.value)
    nodes: list[Any] = []
    if literal:
        nodes.append(_PathPrefix(tuple(literal)) if prefix else _Path(frozenset(literal)))
    if templates:
        nodes.append(_PathRegexp(templates))
    return nodes[0] if len(nodes) == 1 else _Or(nodes)


def _v2_path(args: list[_Token]) -> Any:
    return _v2_paths(args, prefix=False)


def _v2_path_prefix(args: list[_Token]) -> Any:
    return _v2_paths(args, prefix=True)


def _v2_method(args: list[_Token]) -> Any:
    return _Method(frozenset(a.value.upper() for a in args))


def _pairs(name: str, args: list[_Token]) -> list[tuple[_Token, _Token]]:
    if len(args) % 2:
        raise _Fail(args[-1].column, f"{name} takes name/value pairs, got {len(args)} values")
    return [(args[i], args[i + 1]) for i in range(0, len(args), 2)]


def _v2_headers(args: list[_Token]) -> Any:
    # mux keeps the last value given for a name
    pairs = {_header_name(k): v.value for k, v in _pairs("Headers", args)}
    nodes = [_Header(k, v) for k, v in pairs.items()]
    return nodes[0] if len(nodes) == 1 else _And(nodes)


def _v2_headers_regexp(args: list[_Token]) -> Any:
    pairs = {_header_name(k): _regexp(v) for k, v in _pairs("HeadersRegexp", args)}
    nodes = [_ValuesRegexp("header_values", k, p) for k, p in pairs.items()]
    return nodes[0] if len(nodes) == 1 else _And(nodes)


def _v2_query(args: list[_Token]) -> Any:
    # Traefik v2 splits every value at its first '=' and pairs up the pieces:
    # Query(`a=1`, `b=`) is a=1 and b=(anything); an odd number of pieces is an error.
    pieces: list[_Token] = []
    for arg in args:
        name, eq, text = arg.value.partition("=")
        pieces.append(_Token("string", name, arg.column))
        if eq:
            pieces.append(_Token("string", text, arg.column + len(name) + 1))
    if len(pieces) % 2:
        raise _Fail(
            args[-1].column, "Query takes key=value values in v2 (a key alone is v3: Query(`key`))"
        )
    nodes = []
    for i in range(0, len(pieces), 2):
        key, value = pieces[i], pieces[i + 1]
        template = _Token("string", f"{key.value}={value.value}", key.column)
        nodes.append(
            _QueryTemplate(
                key.value, _template(template, ".*", host=False, prefix=False, query=True)
            )
        )
    return nodes[0] if len(nodes) == 1 else _And(nodes)


def _v2_client_ip(args: list[_Token]) -> Any:
    return _ClientIP([_network(a) for a in args])


def _v2_host_sni(args: list[_Token]) -> Any:
    if args[0].value == "*":
        return _Always()
    keys = []
    for arg in args:
        if arg.value == "*":  # after the first: any name, but a name there must be
            return _Regexp("sni", [_compile_re2(".")])
        keys.append(_sni_key(arg, _SNI_V2_RE))
    return _Host("sni", frozenset(keys))


def _v2_host_sni_regexp(args: list[_Token]) -> Any:
    return _Regexp(
        "sni", [_template(a, "[^.]+", host=True, prefix=False, query=False) for a in args]
    )


def _v2_alpn(args: list[_Token]) -> Any:
    return _ALPN(frozenset(_alpn(a) for a in args))


MATCHERS: Final[dict[str, _Spec]] = {
    "Host": _Spec(_v2_host, 1, _MANY, _HTTP),
    "HostHeader": _Spec(_v2_host, 1, _MANY, _HTTP),
    "HostRegexp": _Spec(_v2_host_regexp, 1, _MANY, _HTTP),
    "Path": _Spec(_v2_path, 1, _MANY, _HTTP),
    "PathPrefix": _Spec(_v2_path_prefix, 1, _MANY, _HTTP),
    "Method": _Spec(_v2_method, 1, _MANY, _HTTP),
    "Headers": _Spec(_v2_headers, 1, _MANY, _HTTP),
    "HeadersRegexp": _Spec(_v2_headers_regexp, 1, _MANY, _HTTP),
    "Query": _Spec(_v2_query, 1, _MANY, _HTTP),
    "ClientIP": _Spec(_v2_client_ip, 1, _MANY, _BOTH),
    "HostSNI": _Spec(_v2_host_sni, 1, _MANY, _TCP),
    "HostSNIRegexp": _Spec(_v2_host_sni_regexp, 1, _MANY, _TCP),
    "ALPN": _Spec(_v2_alpn, 1, _MANY, _TCP),
}

# What a v2 name is in v3, for the message.
_V3_INSTEAD: Final = {
    "Headers": ": write Header(`name`, `value`)",
    "HeadersRegexp": ": write HeaderRegexp(`name`, `regexp`)",
    "HostHeader": ": write Host(`host`)",
}
