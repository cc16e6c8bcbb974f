"""edge.http.codec.headers: the cut around changed values (``volatile_lines``) and
the field-line pattern the varied quick paths check values with (``FIELD_LINES``).
"""

from __future__ import annotations

import pytest


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        (b"HTTP/1.1 200 OK\r\nA: 1\r\n\r\n", b"HTTP/1.1 200 OK\r\nA: 1\r\n\r\n", None),  # equal
        (
            b"HTTP/1.1 200 OK\r\nA: 1\r\n\r\n",
            b"HTTP/1.1 201 OK\r\nA: 1\r\n\r\n",
            None,
        ),  # start line
        (
            b"HTTP/1.1 200 OK\r\nA: 1\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nB: 1\r\n\r\n",
            None,
        ),  # first name
        (b"\r\nHost: a\r\nB: 2\r\n\r\n", b"\r\nHost: b\r\nB: 2\r\n\r\n", None),  # Host
        (b"\r\nA: 1\r\ncontent-LENGTH: 2\r\n\r\n", b"\r\nA: 1\r\ncontent-LENGTH: 3\r\n\r\n", None),
        (
            b"\r\nA: 1\r\nB: 2\r\n\r\n",
            b"\r\nA: 9\r\nB: 2\r\n\r\n",
            (b"\r\nA:", b"\r\nB: 2\r\n\r\n", 0),
        ),
        (
            b"\r\nA: 1\r\nB: 2\r\n\r\n",
            b"\r\nA: 10\r\nB: 2\r\n\r\n",
            (b"\r\nA:", b"\r\nB: 2\r\n\r\n", 0),
        ),
        (
            b"\r\nA: 10\r\nB: 2\r\n\r\n",
            b"\r\nA:\r\nB: 2\r\n\r\n",
            (b"\r\nA:", b"\r\nB: 2\r\n\r\n", 0),
        ),
        # Several lines differ: cut around all of them.
        (b"\r\nA: 1\r\nB: 2\r\n\r\n", b"\r\nA: 9\r\nB: 8\r\n\r\n", (b"\r\nA:", b"\r\n\r\n", 1)),
        (
            b"\r\nA: 1\r\nX: 5\r\nB: 2\r\nC: 3\r\n\r\n",
            b"\r\nA: 9\r\nX: 5\r\nB: 8\r\nC: 3\r\n\r\n",
            (b"\r\nA:", b"\r\nC: 3\r\n\r\n", 2),
        ),
        # ... unless a framing header lies between: then around the last one alone.
        (
            b"\r\nA: 1\r\nConnection: close\r\nB: 2\r\n\r\n",
            b"\r\nA: 9\r\nConnection: close\r\nB: 8\r\n\r\n",
            (b"\r\nA: 9\r\nConnection: close\r\nB:", b"\r\n\r\n", 0),
        ),
        # A line added or renamed: from the colon of the line before it.
        (b"\r\nA: 1\r\n\r\n", b"\r\nA: 1\r\nB: 2\r\n\r\n", (b"\r\nA:", b"\r\n\r\n", 1)),
        (b"\r\nA: 1\r\nB: 2\r\n\r\n", b"\r\nA: 1\r\nC: 2\r\n\r\n", (b"\r\nA:", b"\r\n\r\n", 1)),
        (b"\r\nHost: 1\r\nB: 2\r\n\r\n", b"\r\nHost: 1\r\nC: 2\r\n\r\n", None),  # that line is Host
        (b"\r\nA: 1\r\nB: 2\r\n\r\n", b"\r\nB: 2\r\n\r\n", None),  # a name at the start
    ],
)
def test_volatile_lines_cut_around_the_changed_values(old, new, expected):
    from edge.http.codec.headers import FIELD_LINES, volatile_lines

    got = volatile_lines(old, new)
    assert got == expected
    if got is not None:  # new itself is made of the two parts and what FIELD_LINES takes
        pre, suf, lines = got
        assert new.startswith(pre) and new.endswith(suf)
        assert FIELD_LINES[lines].fullmatch(new, len(pre), len(new) - len(suf))


def test_field_lines_bytes_are_llhttps():
    """The varied quick paths check changed values with headers.FIELD_LINES instead of
    llhttp: a byte, anywhere in a value, or in a name, is taken exactly when llhttp
    takes it, and no line naming a framing header is."""
    import httptools

    from edge.http.codec.headers import FIELD_LINES

    class Silent:
        pass

    for byte in range(256):
        for value in (bytes([byte]), b"a" + bytes([byte]) + b"b", b"a" + bytes([byte])):
            parser = httptools.HttpRequestParser(Silent())
            try:
                parser.feed_data(b"GET / HTTP/1.1\r\nHost: a\r\nX-V:" + value + b"\r\n\r\n")
                accepted = True
            except httptools.HttpParserError:
                accepted = False
            assert (FIELD_LINES[0].fullmatch(value) is not None) == accepted, (byte, value)
        name = b"X" + bytes([byte]) + b"Y"
        parser = httptools.HttpRequestParser(Silent())
        try:
            parser.feed_data(b"GET / HTTP/1.1\r\nHost: a\r\n" + name + b": 1\r\n\r\n")
            accepted = True  # (":" too: "X:Y: 1" is field X)
        except httptools.HttpParserError:
            accepted = False
        assert (FIELD_LINES[1].fullmatch(b"v\r\n" + name + b": 1") is not None) == accepted, name
    for name in (
        b"Host",
        b"CONNECTION",
        b"content-length",
        b"Transfer-Encoding",
        b"te",
        b"X-Forwarded-For",
    ):
        assert FIELD_LINES[1].fullmatch(b"v\r\n" + name + b": 1") is None
        assert FIELD_LINES[1].fullmatch(b"v\r\n" + name + b"x: 1") is not None
    assert (
        FIELD_LINES[1].fullmatch(b"v\r\n: 1") is None
        and FIELD_LINES[1].fullmatch(b"v\r\n\r\n") is None
    )
