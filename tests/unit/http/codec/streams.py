"""The differential harness: a stream fed to one codec, split where told, and the
normalized list of events it gave (heads as tuples, body bytes joined, the class of
the error that ended parsing), so two codecs' runs compare with ``==``.
"""

from __future__ import annotations

from edge.errors import ProtocolError
from edge.http.codec.parsers import parser_classes

BIG = 1 << 20


class Events:
    """A Handler normalizing events; for responses it calls ``expect`` as a proxy would."""

    def __init__(self, methods: list[bytes] | None) -> None:
        self.events: list[list] = []
        self.methods = None if methods is None else list(methods)
        self.parser = None
        self.upgraded = False

    def on_head(self, head) -> None:
        self.events.append(["head", head.as_tuple(), head.raw, head.passthrough])

    def on_body(self, data: bytes) -> None:
        assert data and isinstance(data, bytes)
        if self.events and self.events[-1][0] == "body":
            self.events[-1][1] += data
        else:
            self.events.append(["body", data])

    def on_interim(self, head) -> None:
        self.events.append(["interim", head.as_tuple(), head.raw])

    def on_trailers(self, fields) -> None:
        assert fields
        self.events.append(["trailers", fields])

    def on_end(self) -> None:
        self.events.append(["end"])
        if self.methods:
            self.parser.expect(self.methods.pop(0))

    def on_upgrade(self, rest: bytes) -> None:
        self.events.append(["upgrade", rest])
        self.upgraded = True


def run(
    codec: str, data: bytes, cuts: list[int], methods: list[bytes] | None, eof: bool, max_bytes: int
) -> list:
    request_cls, response_cls = parser_classes(codec)
    events = Events(methods)
    parser = (request_cls if methods is None else response_cls)(events, max_bytes)
    events.parser = parser
    if events.methods is not None:
        parser.expect(events.methods.pop(0))
    try:
        prev = 0
        for cut in [*cuts, len(data)]:
            piece = data[prev:cut]
            prev = cut
            if events.upgraded:
                events.events[-1][1] += piece  # a server sends these to the tunnel
            else:
                parser.feed(piece)
        if eof:
            parser.feed_eof()
    except ProtocolError as exc:
        events.events.append(["error", type(exc).__name__])
    return events.events


H = b"Host: example.com\r\n"


def varied_request(value: bytes) -> bytes:
    return b"GET /v HTTP/1.1\r\nHost: a\r\nX-Id: " + value + b"\r\nAccept: */*\r\n\r\n"


def varied_response(value: bytes, length: bytes = b"0", body: bytes = b"") -> bytes:
    return (
        b"HTTP/1.1 200 OK\r\nX-Id: " + value + b"\r\nContent-Length: " + length + b"\r\n\r\n" + body
    )
