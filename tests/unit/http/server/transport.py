"""The transport the server tests run on: ``loadtest/bench_hotpath.py``'s fake one, keeping
the bytes written rather than counting them."""

from __future__ import annotations

from loadtest.bench_hotpath import FakeTransport


class Recorder(FakeTransport):
    """The benchmark's fake transport, keeping the bytes written rather than counting them."""

    def __init__(self, peer: tuple[str, int]) -> None:
        super().__init__(peer)
        self.data = bytearray()

    def write(self, data: bytes) -> None:
        self.data += data

    def writelines(self, parts) -> None:
        for part in parts:
            self.data += part
