"""Go's regexps at request time: RE2 matching and Go's ``ReplaceAllString``.

A :class:`GoRegexp` is built once per configuration from a pattern and, where the
middleware replaces, a template (both checked, and their errors worded, by
:func:`edge.config.dynamic.go_regexp` and :func:`~edge.config.dynamic.go_template`).
Matching runs RE2 on bytes: linear in the input, so no pattern can stall the loop.
"""

from __future__ import annotations

from typing import Final

import re2

from edge.config.dynamic import go_regexp, go_template

__all__ = ["GoRegexp"]

_UNANCHORED: Final = re2._re2.RE2.Anchor.UNANCHORED


class GoRegexp:
    """One compiled pattern, and its replacement template when it has one."""

    __slots__ = ("_match", "pattern", "template")

    def __init__(self, pattern: str, key: str, template: str | None = None) -> None:
        compiled = go_regexp(pattern, key)
        self.pattern = pattern
        self._match = compiled.Match
        self.template = (
            go_template(template, compiled, key.rsplit(".", 1)[0] + ".replacement")
            if template is not None
            else ()
        )

    def search(self, data: bytes, pos: int = 0) -> list[tuple[int, int]] | None:
        """The leftmost match at or after ``pos`` (Go's leftmost-first): the span of
        the match, then of each group ((-1, -1): did not take part); None: no match."""
        spans = self._match(_UNANCHORED, data, pos, len(data))
        return spans if spans[0][0] >= 0 else None

    def expand(self, data: bytes, spans: list[tuple[int, int]]) -> bytes:
        out = []
        for part in self.template:
            if type(part) is int:
                start, end = spans[part]
                if start >= 0:
                    out.append(data[start:end])
            else:
                out.append(part)
        return b"".join(out)  # type: ignore[arg-type]

    def replace_all(self, data: bytes) -> bytes | None:
        """Go's ``ReplaceAllString``: every match replaced by the template, an empty
        match right after another one left alone; None when nothing matched."""
        out: list[bytes] = []
        last = pos = 0
        matched = False
        size = len(data)
        while pos <= size:
            spans = self._match(_UNANCHORED, data, pos, size)
            start, end = spans[0]
            if start < 0:
                break
            out.append(data[last:start])
            if end > last or start == 0:
                out.append(self.expand(data, spans))
            matched = True
            last = end
            # Go advances at least one character (a whole UTF-8 sequence).
            width = _utf8_width(data, pos) if pos < size else 1
            pos = pos + width if pos + width > end else end
        if not matched:
            return None
        out.append(data[last:])
        return b"".join(out)


def _utf8_width(data: bytes, pos: int) -> int:
    lead = data[pos]
    if lead < 0xC0:
        return 1
    width = 2 if lead < 0xE0 else 3 if lead < 0xF0 else 4
    tail = data[pos + 1 : pos + width]
    if len(tail) != width - 1 or any(b & 0xC0 != 0x80 for b in tail):
        return 1  # not a whole sequence: Go reads one byte (RuneError)
    return width
