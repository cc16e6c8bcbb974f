"""Traefik v3's matchers (the default syntax): one value each (``Header``,
``HeaderRegexp``: two; ``Query``, ``QueryRegexp``: one or two).

Each builder takes the argument tokens and returns a matcher node; :data:`MATCHERS`
names them with their arity and the rule kinds that allow them.
"""

from __future__ import annotations

import re
from typing import Any, Final

from edge.rules.arguments import (
    _BOTH,
    _HTTP,
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
from edge.rules.lexer import _Token
from edge.rules.nodes import (
    _ALPN,
    _Always,
    _ClientIP,
    _Header,
    _Host,
    _Method,
    _Path,
    _PathPrefix,
    _PathRegexp,
    _Query,
    _Regexp,
    _ValuesRegexp,
)
from edge.rules.regexp import _regexp

# Traefik's HostSNI check: word characters, '.', '-', ':' (and a leading '*.' in v3).
_SNI_RE: Final = re.compile(r"(?:\*\.)?[0-9A-Za-z_.:-]+", re.ASCII)


def _v3_host(args: list[_Token]) -> Any:
    if args[0].value == "*":
        return _Always()
    return _Host("host", frozenset((_host_key(args[0], wildcard=True),)))


def _v3_host_regexp(args: list[_Token]) -> Any:
    _ascii(args[0], "HostRegexp")
    return _Regexp("host", [_regexp(args[0])])


def _v3_path(args: list[_Token]) -> Any:
    return _Path(frozenset((_path_value(args[0]),)))


def _v3_path_prefix(args: list[_Token]) -> Any:
    return _PathPrefix((_path_value(args[0]),))


def _v3_path_regexp(args: list[_Token]) -> Any:
    return _PathRegexp([_regexp(args[0])])


def _v3_method(args: list[_Token]) -> Any:
    return _Method(frozenset((args[0].value.upper(),)))


def _v3_header(args: list[_Token]) -> Any:
    return _Header(_header_name(args[0]), args[1].value)


def _v3_header_regexp(args: list[_Token]) -> Any:
    return _ValuesRegexp("header_values", _header_name(args[0]), _regexp(args[1]))


def _v3_query(args: list[_Token]) -> Any:
    return _Query(args[0].value, args[1].value if len(args) == 2 else "")


def _v3_query_regexp(args: list[_Token]) -> Any:
    if len(args) == 1:
        return _Query(args[0].value, "")
    return _ValuesRegexp("query_values", args[0].value, _regexp(args[1]))


def _v3_client_ip(args: list[_Token]) -> Any:
    return _ClientIP([_network(args[0])])


def _v3_host_sni(args: list[_Token]) -> Any:
    if args[0].value == "*":
        return _Always()
    return _Host("sni", frozenset((_sni_key(args[0], _SNI_RE),)))


def _v3_host_sni_regexp(args: list[_Token]) -> Any:
    _ascii(args[0], "HostSNIRegexp")
    return _Regexp("sni", [_regexp(args[0])])


def _v3_alpn(args: list[_Token]) -> Any:
    return _ALPN(frozenset((_alpn(args[0]),)))


MATCHERS: Final[dict[str, _Spec]] = {
    "Host": _Spec(_v3_host, 1, 1, _HTTP),
    "HostRegexp": _Spec(_v3_host_regexp, 1, 1, _HTTP),
    "Path": _Spec(_v3_path, 1, 1, _HTTP),
    "PathPrefix": _Spec(_v3_path_prefix, 1, 1, _HTTP),
    "PathRegexp": _Spec(_v3_path_regexp, 1, 1, _HTTP),
    "Method": _Spec(_v3_method, 1, 1, _HTTP),
    "Header": _Spec(_v3_header, 2, 2, _HTTP),
    "HeaderRegexp": _Spec(_v3_header_regexp, 2, 2, _HTTP),
    "Query": _Spec(_v3_query, 1, 2, _HTTP),
    "QueryRegexp": _Spec(_v3_query_regexp, 1, 2, _HTTP),
    "ClientIP": _Spec(_v3_client_ip, 1, 1, _BOTH),
    "HostSNI": _Spec(_v3_host_sni, 1, 1, _TCP),
    "HostSNIRegexp": _Spec(_v3_host_sni_regexp, 1, 1, _TCP),
    "ALPN": _Spec(_v3_alpn, 1, 1, _TCP),
}
