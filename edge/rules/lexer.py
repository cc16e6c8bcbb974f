"""The rule language's lexer: backquoted and Go-escaped double-quoted strings, names,
``(``, ``)``, ``,``, ``&&``, ``||`` and ``!``, each token with its 1-based column.

Tokens are produced on demand, so an error is reported where the parser meets it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

_GO_ESCAPES: Final = {
    '"': '"', "\\": "\\", "'": "'",
    "a": "\a", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t", "v": "\v",
}  # fmt: skip
_WHITESPACE: Final = " \t\r\n"


class _Fail(Exception):
    """Internal: a problem at a column; compile_rule turns it into RuleError."""

    def __init__(self, column: int, message: str) -> None:
        super().__init__(message)
        self.column = column
        self.message = message


@dataclass(frozen=True, slots=True)
class _Token:
    kind: str  # "name", "string", "(", ")", ",", "&&", "||", "!", "end"
    value: str
    column: int  # 1-based

    def describe(self) -> str:
        if self.kind == "end":
            return "end of rule"
        if self.kind == "string":
            return "a string"
        return repr(self.value)


class _Lexer:
    """Produces tokens on demand, so an error is reported where the parser meets it."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0

    def next(self) -> _Token:
        text, n = self.text, len(self.text)
        pos = self.pos
        while pos < n and text[pos] in _WHITESPACE:
            pos += 1
        if pos >= n:
            self.pos = pos
            return _Token("end", "", pos + 1)
        ch = text[pos]
        column = pos + 1
        if ch in "(),!":
            self.pos = pos + 1
            return _Token(ch, ch, column)
        if ch in "&|":
            if text.startswith(ch * 2, pos):
                self.pos = pos + 2
                return _Token(ch * 2, ch * 2, column)
            raise _Fail(column, f"expected {ch * 2!r}, found a single {ch!r}")
        if ch.isascii() and (ch.isalpha() or ch == "_"):
            end = pos + 1
            while end < n and text[end].isascii() and (text[end].isalnum() or text[end] == "_"):
                end += 1
            self.pos = end
            return _Token("name", text[pos:end], column)
        if ch == "`":
            end = text.find("`", pos + 1)
            if end == -1:
                raise _Fail(column, "unterminated string")
            self.pos = end + 1
            return _Token("string", text[pos + 1 : end], column)
        if ch == '"':
            return self._double_quoted(pos)
        raise _Fail(column, f"unexpected character {ch!r}")

    def _double_quoted(self, start: int) -> _Token:
        text, n = self.text, len(self.text)
        out: list[str] = []
        pos = start + 1
        while pos < n:
            ch = text[pos]
            if ch == '"':
                self.pos = pos + 1
                return _Token("string", "".join(out), start + 1)
            if ch == "\\":
                if pos + 1 >= n:
                    break
                escaped = _GO_ESCAPES.get(text[pos + 1])
                if escaped is None:
                    raise _Fail(
                        pos + 1,
                        f"invalid escape '\\{text[pos + 1]}' in double-quoted string "
                        "(use a `backtick` string for regexps)",
                    )
                out.append(escaped)
                pos += 2
                continue
            out.append(ch)
            pos += 1
        raise _Fail(start + 1, "unterminated string")
