"""What a matcher's arguments may be, in both syntaxes, and the spec of a matcher.

Each check takes an argument token (count checked, none empty) and returns its value,
raising _Fail at the offending argument's column for a bad one.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

from edge.rules.hosts import canonical_host
from edge.rules.lexer import _Fail, _Token
from edge.rules.nodes import Network, unmapped_network

_ACME_ALPN: Final = "acme-tls/1"


def _ascii(arg: _Token, what: str) -> str:
    if not arg.value.isascii():
        raise _Fail(
            arg.column, f"invalid {what} {arg.value!r}: non-ASCII characters are not allowed"
        )
    return arg.value


def _host_key(arg: _Token, *, wildcard: bool) -> str:
    value = _ascii(arg, "host")
    name = canonical_host(value) if value.startswith("[") else value.lower().removesuffix(".")
    if "*" in name:
        if not wildcard:
            raise _Fail(arg.column, f"invalid host {value!r}: v2 Host has no wildcards (v3 has)")
        if not name.startswith("*.") or "*" in name[1:] or len(name) < 3:
            raise _Fail(
                arg.column,
                f"invalid host {value!r}: a wildcard is '*.' and a domain (one label), or '*'",
            )
    return name


def _path_value(arg: _Token) -> str:
    if not arg.value.startswith("/"):
        raise _Fail(arg.column, f"path {arg.value!r} does not start with '/'")
    return arg.value


def _header_name(arg: _Token) -> str:
    name = arg.value
    if not name.isascii() or any(c in name for c in ' \t:"'):
        raise _Fail(arg.column, f"invalid header name {name!r}")
    return name.lower()


def _network(arg: _Token) -> Network:
    try:
        network = ipaddress.ip_network(arg.value.strip(), strict=False)
    except ValueError:
        raise _Fail(arg.column, f"invalid IP address or CIDR {arg.value!r}") from None
    return unmapped_network(network)


def _alpn(arg: _Token) -> str:
    if arg.value == _ACME_ALPN:
        raise _Fail(arg.column, f"ALPN protocol {_ACME_ALPN!r} is not allowed")
    return arg.value


def _sni_key(arg: _Token, pattern: re.Pattern[str]) -> str:
    if not pattern.fullmatch(arg.value):
        raise _Fail(arg.column, f"invalid HostSNI {arg.value!r}: not a host name or IP")
    return arg.value.lower().removesuffix(".")


@dataclass(frozen=True, slots=True)
class _Spec:
    build: Callable[[list[_Token]], Any]
    min_args: int
    max_args: int
    kinds: tuple[str, ...]

    def arity(self) -> str:
        plural = "s" if self.max_args != 1 else ""
        if self.min_args == self.max_args:
            return f"takes exactly {self.min_args} argument{plural}"
        if self.max_args < _MANY:
            return f"takes {self.min_args} or {self.max_args} arguments"
        return f"takes at least {self.min_args} argument{'s' if self.min_args != 1 else ''}"


_MANY: Final = 1 << 16
_HTTP: Final = ("http",)
_TCP: Final = ("tcp",)
_BOTH: Final = ("http", "tcp")
