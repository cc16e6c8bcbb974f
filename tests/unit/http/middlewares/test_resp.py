"""RESP2/RESP3 (edge.http.middlewares.resp): commands encoded, replies parsed from
tables of wire bytes, each reply also fed split at every offset and byte by byte,
and the bytes the protocol does not allow refused."""

from __future__ import annotations

import math

import pytest

from edge.http.middlewares.resp import (
    NEED_DATA,
    Parser,
    Push,
    ReplyError,
    RESPError,
    command,
)


def test_command_is_an_array_of_bulk_strings():
    assert command("EVALSHA", b"ab", 1, "k", 2.5) == (
        b"*5\r\n$7\r\nEVALSHA\r\n$2\r\nab\r\n$1\r\n1\r\n$1\r\nk\r\n$3\r\n2.5\r\n"
    )
    assert command("PING") == b"*1\r\n$4\r\nPING\r\n"
    assert command(b"") == b"*1\r\n$0\r\n\r\n"
    assert command("SET", "k", b"a\r\nb") == b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$4\r\na\r\nb\r\n"


@pytest.mark.parametrize("arg", [True, None, [1]])
def test_command_refuses_what_is_not_an_argument(arg):
    with pytest.raises(TypeError):
        command("SET", arg)


REPLIES = [
    # RESP2
    (b"+OK\r\n", "OK"),
    (b"+\r\n", ""),
    (b"-ERR unknown command 'FOO'\r\n", ReplyError("ERR unknown command 'FOO'")),
    (b":0\r\n", 0),
    (b":-42\r\n", -42),
    (b":+7\r\n", 7),
    (b"$5\r\nhello\r\n", b"hello"),
    (b"$0\r\n\r\n", b""),
    (b"$4\r\na\r\nb\r\n", b"a\r\nb"),  # a bulk string holds any byte
    (b"$-1\r\n", None),
    (b"*-1\r\n", None),
    (b"*0\r\n", []),
    (b"*2\r\n$1\r\n1\r\n:750\r\n", [b"1", 750]),
    (
        b"*3\r\n*2\r\n:1\r\n*1\r\n$-1\r\n-NOSCRIPT No matching script\r\n+x\r\n",
        [[1, [None]], ReplyError("NOSCRIPT No matching script"), "x"],
    ),
    # RESP3
    (b"_\r\n", None),
    (b",1.5\r\n", 1.5),
    (b",-0.25\r\n", -0.25),
    (b",inf\r\n", math.inf),
    (b",-inf\r\n", -math.inf),
    (b",10\r\n", 10.0),
    (b",1e3\r\n", 1000.0),
    (b"#t\r\n", True),
    (b"#f\r\n", False),
    (
        b"(3492890328409238509324850943850943825024385\r\n",
        3492890328409238509324850943850943825024385,
    ),
    (b"!21\r\nSYNTAX invalid syntax\r\n", ReplyError("SYNTAX invalid syntax")),
    (b"=15\r\ntxt:Some string\r\n", b"Some string"),
    (b"%2\r\n+first\r\n:1\r\n$6\r\nsecond\r\n:2\r\n", {"first": 1, b"second": 2}),
    (b"%1\r\n*2\r\n:1\r\n:2\r\n+v\r\n", {(1, 2): "v"}),
    (b"~3\r\n:1\r\n:2\r\n:1\r\n", [1, 2, 1]),
    (b">2\r\n+message\r\n$2\r\nhi\r\n", Push(["message", b"hi"])),
    (b"|1\r\n+key-popularity\r\n%1\r\n$1\r\na\r\n,0.19\r\n*1\r\n:5\r\n", [5]),
    (
        b"%2\r\n+server\r\n+redis\r\n+modules\r\n*0\r\n",
        {"server": "redis", "modules": []},
    ),
]


def _all(parser: Parser) -> list[object]:
    out = []
    for _ in range(100):
        value = parser.next()
        if value is NEED_DATA:
            return out
        out.append(value)
    raise AssertionError("more than 100 replies")


def _same(a: object, b: object) -> bool:
    if type(a) is not type(b):
        return False
    if isinstance(a, float) and math.isnan(a):
        return math.isnan(b)  # type: ignore[arg-type]
    return a == b


@pytest.mark.parametrize(("wire", "value"), REPLIES)
def test_reply_whole(wire, value):
    p = Parser()
    p.feed(wire)
    got = p.next()
    assert _same(got, value), got
    assert p.next() is NEED_DATA


@pytest.mark.parametrize(("wire", "value"), REPLIES)
def test_reply_split_at_every_offset(wire, value):
    """However the stream is cut, nothing comes out before the reply is whole, and
    then exactly it."""
    for cut in range(len(wire) + 1):
        p = Parser()
        p.feed(wire[:cut])
        first = _all(p)
        p.feed(wire[cut:])
        rest = _all(p)
        assert first == [] if cut < len(wire) else len(first) == 1, cut
        (got,) = first + rest
        assert _same(got, value), (cut, got)


def test_stream_of_every_reply_byte_by_byte():
    wire = b"".join(w for w, _ in REPLIES)
    p = Parser()
    got: list[object] = []
    for i in range(len(wire)):
        p.feed(wire[i : i + 1])
        got.extend(_all(p))
    assert len(got) == len(REPLIES)
    for g, (_, value) in zip(got, REPLIES, strict=True):
        assert _same(g, value)


def test_nan_double():
    p = Parser()
    p.feed(b",nan\r\n")
    assert math.isnan(p.next())  # type: ignore[arg-type]


def test_reply_error_code_is_its_first_word():
    assert ReplyError("NOSCRIPT No matching script. Use EVAL.").code == "NOSCRIPT"
    assert ReplyError("WRONGPASS invalid username-password pair").code == "WRONGPASS"


@pytest.mark.parametrize(
    ("wire", "says"),
    [
        (b"?what\r\n", "unknown reply type"),
        (b":12a\r\n", "not a number"),
        (b":\r\n", "not a number"),
        (b"$x\r\n", "not a number"),
        (b"$-2\r\n", "negative"),
        (b"$3\r\nabcde\r\n", "not ended by CRLF"),
        (b"*-2\r\n", "negative"),
        (b"%-1\r\n", "length -1"),
        (b"#x\r\n", "not t or f"),
        (b",one\r\n", "not a number"),
        (b"_x\r\n", "null with data"),
        (b"=3\r\nabc\r\n", "without its format"),
        (b"!-1\r\n", "length -1"),
        (b"*1\r\n" * 40 + b":1\r\n", "nested deeper"),
    ],
)
def test_bad_bytes_are_refused(wire, says):
    p = Parser()
    p.feed(wire)
    with pytest.raises(RESPError, match=says):
        p.next()


def test_an_incomplete_reply_is_capped():
    """A peer cannot make the parser buffer without end: a string announced over the
    cap, a line with no end, or an aggregate that never ends are refused."""
    p = Parser(max_size=1000)
    p.feed(b"$2000\r\n")
    with pytest.raises(RESPError, match="over 1000"):
        p.next()
    p = Parser()
    p.feed(b"+" + b"a" * 70000)
    with pytest.raises(RESPError, match="64 KiB"):
        p.next()
    p = Parser(max_size=1000)
    p.feed(b"*100000\r\n")
    for _ in range(300):
        p.feed(b":1\r\n")
    with pytest.raises(RESPError, match="longer than 1000"):
        p.next()


def test_replies_leave_the_buffer_once_read():
    p = Parser()
    for i in range(1000):
        p.feed(b":%d\r\n" % i)
        assert p.next() == i
    assert len(p.buf) <= 8
