"""Go's regexps at request time (edge.http.middlewares.goregexp): ReplaceAllString's
handling of empty matches and Expand's templates, against what Go's regexp answers."""

from __future__ import annotations

import re

import pytest

from edge.http.middlewares.goregexp import GoRegexp


@pytest.mark.parametrize(
    ("pattern", "template", "text", "expected"),
    [
        # Go: regexp.MustCompile(`x*`).ReplaceAllString("abxd", "-") == "-a-b-d-"
        ("x*", "-", b"abxd", b"-a-b-d-"),
        ("a(x*)b", "${1}W", b"-ab-axxb-", b"-W-xxW-"),
        ("a(x*)b", "$1W", b"-ab-axxb-", b"---"),  # $1W is the group named 1W: empty
        (
            "(?P<first>\\w+)\\s(?P<second>\\w+)",
            "${second} ${first}",
            b"hello world",
            b"world hello",
        ),
        ("b", "$$", b"abc", b"a$c"),
        ("b", "${", b"abc", b"a${c"),
        ("^/a", "/b", b"/a/a", b"/b/a"),
        ("", "-", b"\xc3\xa9", b"-\xc3\xa9-"),  # a UTF-8 sequence is one character
        ("z", "-", b"abc", None),
    ],
)
def test_replace_all(pattern, template, text, expected):
    try:
        regexp = GoRegexp(pattern, "r.regex", template)
    except ValueError:
        assert template == "$1W"  # edge refuses a group the regexp does not have
        return
    assert regexp.replace_all(text) == expected


@pytest.mark.parametrize(
    ("pattern", "error"),
    [
        ("a(b", "missing )"),
        ("(a)\\1", "invalid escape"),
        ("a(?=b)", "invalid perl operator"),
        ("a(?<!b)", "invalid"),
        ("\\C", "invalid escape"),
        ("(?P<n>a)(?P<n>b)", "duplicate capture group name"),
    ],
)
def test_re2_refusals_name_the_key(pattern, error):
    with pytest.raises(ValueError, match=re.escape(error)) as info:
        GoRegexp(pattern, "redirectRegex.regex")
    assert str(info.value).startswith("redirectRegex.regex: invalid regexp")


def test_missing_group_names_the_replacement():
    with pytest.raises(ValueError, match=r"replacement: names group '2'"):
        GoRegexp("^/(a)", "replacePathRegex.regex", "/$2")
    with pytest.raises(ValueError, match=r"write \$\{1\}x for group 1"):
        GoRegexp("^/(a)", "replacePathRegex.regex", "/$1x")
