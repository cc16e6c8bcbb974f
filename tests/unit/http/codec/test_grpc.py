"""gRPC's HTTP/2 mapping as edge reads and writes it: grpc-timeout, trailers-only answers."""

from __future__ import annotations

import pytest

from edge.http.codec.grpc import DEADLINE_EXCEEDED, timeout_of, trailers_only
from edge.http.codec.h11 import ResponseParser

GRPC = (b"content-type", b"application/grpc+proto")


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        (b"1H", 3600.0),
        (b"2M", 120.0),
        (b"3S", 3.0),
        (b"250m", 0.25),
        (b"1500u", 0.0015),
        (b"99999999n", 0.099999999),
    ],
)
def test_grpc_timeout_units(value, seconds):
    assert timeout_of([GRPC, (b"grpc-timeout", value)]) == pytest.approx(seconds)


@pytest.mark.parametrize("value", [b"", b"S", b"123456789S", b"1s", b"-1S", b"1.5S", b"10"])
def test_grpc_timeout_outside_the_grammar_is_no_deadline(value):
    assert timeout_of([GRPC, (b"grpc-timeout", value)]) is None


def test_grpc_timeout_only_for_grpc_requests():
    assert timeout_of([(b"grpc-timeout", b"1S")]) is None
    assert timeout_of([(b"content-type", b"text/plain"), (b"grpc-timeout", b"1S")]) is None
    assert timeout_of([GRPC]) is None
    assert timeout_of([(b"Grpc-Timeout", b"2S"), (b"Content-Type", b"application/grpc")]) == 2.0


class Events:
    def __init__(self) -> None:
        self.heads: list = []
        self.ended = 0

    def on_head(self, head) -> None:
        self.heads.append(head)

    def on_body(self, data: bytes) -> None:
        raise AssertionError("a trailers-only answer has no body")

    def on_end(self) -> None:
        self.ended += 1

    def on_upgrade(self, rest: bytes) -> None:
        raise AssertionError


def test_trailers_only_answer_reads_as_one_empty_response():
    events = Events()
    parser = ResponseParser(events)
    parser.expect(b"POST")
    parser.feed(trailers_only(DEADLINE_EXCEEDED, "late: 100% over"))
    (head,) = events.heads
    assert events.ended == 1
    assert head.status == 200 and head.content_length == 0
    fields = dict((n.lower(), v) for n, v in head.headers)
    assert fields[b"grpc-status"] == b"4"
    assert fields[b"grpc-message"] == b"late: 100%25 over"  # percent-encoded, as gRPC has it
    assert fields[b"content-type"] == b"application/grpc"
