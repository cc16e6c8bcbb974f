"""Regexps as Go's ``regexp`` reads them, run by RE2, and gorilla/mux templates (v2).

RE2 is linear in its input, so no rule can stall the event loop. Everything here runs
when a rule is compiled; matching calls only :meth:`_RE2.search`.
"""

from __future__ import annotations

import re
from typing import Final

import re2  # google-re2: RE2 itself, the engine (and syntax) of Go's regexp

from edge.rules.lexer import _Fail, _Token

_UNANCHORED: Final = re2._re2.RE2.Anchor.UNANCHORED


class _RE2:
    """A compiled RE2 regexp: ``search`` finds a match anywhere, as Go's ``MatchString``.

    Calls RE2's own ``Match`` (``re2._re2``): the module's ``re``-like wrapper builds a
    match object per call and costs about ten times more.
    """

    __slots__ = ("_match", "pattern")

    def __init__(self, pattern: str) -> None:
        options = re2.Options()
        options.log_errors = False
        options.never_capture = True
        compiled = re2._re2.RE2(pattern.encode("utf-8", "surrogateescape"), options)
        if not compiled.ok():
            error = compiled.error()
            raise ValueError(
                error.decode("utf-8", "replace") if isinstance(error, bytes) else error
            )
        self.pattern = pattern
        self._match = compiled.Match

    def search(self, text: str) -> bool:
        data = text.encode("utf-8", "surrogateescape")
        return self._match(_UNANCHORED, data, 0, len(data))[0][0] >= 0

    def __repr__(self) -> str:
        return f"RE2({self.pattern!r})"


# Go's regexp refuses \C (any byte), which RE2 accepts; everything else they share.
_ANY_BYTE_RE: Final = re.compile(r"(?<!\\)(?:\\\\)*\\C")


def _compile_re2(pattern: str) -> _RE2:
    if _ANY_BYTE_RE.search(pattern):
        raise ValueError(r"invalid escape sequence: \C")
    return _RE2(pattern)


def _quote_meta(text: str) -> str:
    """Go's ``regexp.QuoteMeta``."""
    return re.sub(r"([\\.+*?()|\[\]{}^$])", r"\\\1", text)


def _template_regexp(template: str, default: str, *, host: bool, prefix: bool, query: bool) -> str:
    """A gorilla/mux template (``/a/{id:[0-9]+}``) as the regexp Traefik v2 matches with.

    Literal text is quoted; ``{name}`` is ``default``; anchored at both ends, at the start
    only for a prefix; case-insensitive for hosts; an empty query value matches any.
    """
    spans: list[tuple[int, int]] = []
    level = start = 0
    for i, ch in enumerate(template):
        if ch == "{":
            level += 1
            if level == 1:
                start = i
        elif ch == "}":
            level -= 1
            if level == 0:
                spans.append((start, i + 1))
            elif level < 0:
                raise ValueError(f"unbalanced braces in {template!r}")
    if level != 0:
        raise ValueError(f"unbalanced braces in {template!r}")
    out = ["(?i)^" if host else "^"]
    end = 0
    for begin, stop in spans:
        name, colon, pattern = template[begin + 1 : stop - 1].partition(":")
        pattern = pattern if colon else default
        if not name or not pattern:
            raise ValueError(f"missing name or pattern in {template[begin:stop]!r}")
        _compile_re2(f"^{pattern}$")  # each variable's pattern must stand alone
        out.append(f"{_quote_meta(template[end:begin])}(?:{pattern})")
        end = stop
    out.append(_quote_meta(template[end:]))
    if query and template.partition("=")[2] == "":
        out.append(default)
    if not prefix:
        out.append("$")
    return "".join(out)


def _regexp(arg: _Token) -> _RE2:
    try:
        return _compile_re2(arg.value)
    except ValueError as err:
        raise _Fail(arg.column, f"invalid regexp {arg.value!r}: {err}") from None


def _template(arg: _Token, default: str, **flags: bool) -> _RE2:
    """A v2 template compiled (see :func:`_template_regexp`)."""
    try:
        return _compile_re2(_template_regexp(arg.value, default, **flags))
    except ValueError as err:
        raise _Fail(arg.column, f"invalid template {arg.value!r}: {err}") from None
