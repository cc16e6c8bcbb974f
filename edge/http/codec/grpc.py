"""What edge reads and writes of gRPC's HTTP/2 mapping (PROTOCOL-HTTP2.md), sans-IO.

A request's ``grpc-timeout`` (an integer of at most 8 digits and a unit: H, M, S,
m, u, n) bounds its exchange; when it passes, edge answers the gRPC way: a
trailers-only response (HTTP 200, ``grpc-status: 4`` DEADLINE_EXCEEDED, no body),
which a gRPC client reads as the call's status whatever it already got.
"""

from __future__ import annotations

from edge.http.codec.base import Header

GRPC = b"application/grpc"
DEADLINE_EXCEEDED = 4

_UNITS = {b"H": 3600.0, b"M": 60.0, b"S": 1.0, b"m": 1e-3, b"u": 1e-6, b"n": 1e-9}


def timeout_of(headers: list[Header]) -> float | None:
    """The seconds a gRPC request's ``grpc-timeout`` allows; None for a request that
    is not gRPC, has none, or has one gRPC's grammar refuses (then no deadline, as
    grpc-go's server reads it)."""
    grpc = False
    value = None
    for name, field in headers:
        lname = name.lower()
        if lname == b"grpc-timeout":
            value = field
        elif lname == b"content-type":
            grpc = field.startswith(GRPC)
    if not grpc or value is None:
        return None
    digits, unit = value[:-1], value[-1:]
    if not (0 < len(digits) <= 8 and digits.isdigit()) or unit not in _UNITS:
        return None
    return int(digits) * _UNITS[unit]


def trailers_only(status: int, message: str) -> bytes:
    """A whole trailers-only gRPC response, as edge's HTTP/1.1 writers make responses
    (an HTTP/2 stream reads it back into one HEADERS frame with END_STREAM)."""
    encoded = "".join(
        c if 0x20 <= ord(c) <= 0x7E and c != "%" else "".join(f"%{b:02X}" for b in c.encode())
        for c in message
    )
    return (
        b"HTTP/1.1 200 OK\r\ncontent-type: application/grpc\r\n"
        b"grpc-status: %d\r\ngrpc-message: %s\r\ncontent-length: 0\r\n\r\n"
        % (status, encoded.encode())
    )
