"""The rule language's parser (edge.rules.parser): every error names the rule and the
column of the offending token; an unknown matcher suggests the close name."""

from __future__ import annotations

import pytest

from edge.errors import RuleError
from edge.rules import (
    compile_rule,
)

# (rule, kind, column, message fragment)
ERROR_CASES: list[tuple[str, str, int, str]] = [
    ("Hots(`a`)", "http", 1, "unknown matcher 'Hots'"),
    ("Host(`a`) && Pth(`/`)", "http", 14, "unknown matcher 'Pth'"),
    ("Host(`a`) && Path `/`", "http", 19, "expected '(' after matcher name"),
    ("Host(`a.com`) && Path(`/x", "http", 23, "unterminated string"),
    ('Path("/x)', "http", 6, "unterminated string"),
    ("", "http", 1, "empty rule"),
    ("  \t", "http", 1, "empty rule"),
    ("Host(`a`,)", "http", 10, "expected a quoted string argument"),
    ("Host(a.com)", "http", 6, "expected a quoted string argument, found 'a'"),
    ("(Host(`a`)", "http", 11, "to close '(' at column 1"),
    ("Host(`a`))", "http", 10, "unexpected ')'"),
    ("Host(`a`) Path(`/`)", "http", 11, "expected '&&', '||' or end of rule"),
    ("Host(`a`) &&", "http", 13, "expected a matcher, '!' or '(', found end of rule"),
    ("Host(`a`) && && Path(`/`)", "http", 14, "expected a matcher"),
    ("Host(`a`) & Path(`/`)", "http", 11, "expected '&&'"),
    ("Host(`a`) | Path(`/`)", "http", 11, "expected '||'"),
    ("Host(`a`) && #", "http", 14, "unexpected character '#'"),
    ("Host(`a` `b`)", "http", 10, "expected ',' or ')'"),
    ("Host()", "http", 1, "Host takes exactly 1 argument, got 0"),
    ("Host(`a`, `b`)", "http", 1, "got 2 (several values are v2 syntax"),
    ("Query(`a`, `b`, `c`)", "http", 1, "Query takes 1 or 2 arguments, got 3"),
    ("Headers(`X`, `v`)", "http", 1, "'Headers' is v2 syntax and this rule is v3: write Header("),
    ("Header(`X`, ``)", "http", 13, "empty value for Header"),
    ("Query(`q`, ``)", "http", 12, "empty value for Query"),
    ("Host(`*a.com`)", "http", 6, "a wildcard is '*.'"),
    ("Host(`a.*.com`)", "http", 6, "a wildcard is '*.'"),
    ("HostRegexp(`\u00e9`)", "http", 12, "non-ASCII"),
    ("PathRegexp(`(a)\\1`)", "http", 12, "invalid regexp"),
    ("PathRegexp(`(?=a)`)", "http", 12, "invalid regexp"),
    ("PathRegexp(`a\\C`)", "http", 12, "invalid escape sequence"),
    ("ALPN(`acme-tls/1`)", "tcp", 6, "not allowed"),
    ("HostSNI(`a`, `b`)", "tcp", 1, "HostSNI takes exactly 1 argument, got 2"),
    ("Header(`X`)", "http", 1, "Header takes exactly 2 arguments, got 1"),
    ("Host(`a`) && QueryRegexp(`a`, `b`, `c`)", "http", 14, "takes 1 or 2 arguments, got 3"),
    ("PathRegexp(`^/(a`)", "http", 12, "invalid regexp"),
    ("HostRegexp(`[`)", "http", 12, "invalid regexp"),
    ("HeaderRegexp(`X`, `*`)", "http", 19, "invalid regexp"),
    ("ClientIP(`10.0.0.0/33`)", "http", 10, "invalid IP address or CIDR"),
    ("ClientIP(`nope`)", "http", 10, "invalid IP address or CIDR 'nope'"),
    ("HostSNI(`a.com`)", "http", 1, "not allowed in http rules"),
    ("ALPN(`h2`)", "http", 1, "not allowed in http rules"),
    ("Host(`a`)", "tcp", 1, "not allowed in tcp rules"),
    ("HostSNI(`*`) && Path(`/`)", "tcp", 17, "not allowed in tcp rules"),
    ("HostSNI(`a b`)", "tcp", 9, "invalid HostSNI"),
    ("Path(`a`)", "http", 6, "does not start with '/'"),
    ("Host(``)", "http", 6, "empty value for Host"),
    ("Host(`\u00e9.com`)", "http", 6, "non-ASCII"),
    ('Path("\\d")', "http", 7, "invalid escape"),
    ("!" * 70 + "Host(`a`)", "http", 65, "nested deeper"),
]


@pytest.mark.parametrize(("rule", "kind", "column", "fragment"), ERROR_CASES)
def test_errors_name_rule_and_column(rule: str, kind: str, column: int, fragment: str) -> None:
    with pytest.raises(RuleError) as info:
        compile_rule(rule, kind=kind)
    err = info.value
    assert err.rule == rule
    assert err.column == column, str(err)
    assert fragment in err.message, str(err)
    assert f"column {column}: " in str(err)
    assert repr(rule) in str(err)


def test_unknown_matcher_suggests_the_close_name() -> None:
    with pytest.raises(RuleError, match=r"did you mean 'PathPrefix'"):
        compile_rule("PathPrefx(`/`)")


def test_unknown_kind_is_a_programming_error() -> None:
    with pytest.raises(ValueError):
        compile_rule("Host(`a`)", kind="udp")
