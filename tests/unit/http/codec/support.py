"""What the codec tests share: handlers that record what a parser reports, a request.

``Recorder`` takes request events, ``ResponseRecorder`` response events (it tells
the parser which request method each response answers).
"""

from __future__ import annotations

from edge.http.codec import RequestHead, ResponseHead


class Recorder:
    """A Handler that records events (adjacent body chunks merged)."""

    def __init__(self) -> None:
        self.events: list[tuple] = []
        self.heads: list = []

    def on_head(self, head: RequestHead | ResponseHead) -> None:
        self.heads.append(head)
        self.events.append(("head", head))

    def on_body(self, data: bytes) -> None:
        assert data and isinstance(data, bytes)
        if self.events and self.events[-1][0] == "body":
            self.events[-1] = ("body", self.events[-1][1] + data)
        else:
            self.events.append(("body", data))

    def on_end(self) -> None:
        self.events.append(("end",))

    def on_upgrade(self, rest: bytes) -> None:
        self.events.append(("upgrade", rest))

    def kinds(self) -> list[str]:
        return [e[0] for e in self.events]

    def bodies(self) -> list[bytes]:
        return [e[1] for e in self.events if e[0] == "body"]


class Hearing(Recorder):
    """A Recorder that also takes the optional events: 1xx heads and trailer fields."""

    def on_interim(self, head: ResponseHead) -> None:
        self.events.append(("interim", head))

    def on_trailers(self, fields: list) -> None:
        assert fields
        self.events.append(("trailers", fields))


class ResponseRecorder(Recorder):
    """Calls ``expect()`` with the next method after each response, as a proxy does."""

    def __init__(self, methods: list[bytes]) -> None:
        super().__init__()
        self.methods = list(methods)
        self.parser = None

    def on_end(self) -> None:
        super().on_end()
        if self.methods:
            self.parser.expect(self.methods.pop(0))


GET = b"GET /index.html?q=1 HTTP/1.1\r\nHost: example.com\r\nAccept: */*\r\n\r\n"
