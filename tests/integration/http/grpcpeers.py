"""A gRPC service for the tests, served by the real ``grpcio`` package.

Defined without protoc: grpc's generic handlers with bytes in and bytes out (no
serializer), so a message is the bytes a test sends. :class:`Echo` serves
``/edge.test.Echo/<Method>`` on 127.0.0.1 (h2c, or h2 over TLS with a key pair)
and records what it saw (metadata, cancellations, how far a stream got), for the
tests to read; every wait in it is bounded.
"""

from __future__ import annotations

import threading
import time
from concurrent import futures

import grpc

SERVICE = "edge.test.Echo"
WAIT = 10.0  # the longest any handler waits for anything


class Echo:
    """The service and its grpcio server."""

    def __init__(self, *, tls: tuple[bytes, bytes] | None = None, options: tuple = ()) -> None:
        self.metadata: list[dict[str, str]] = []  # each call's invocation metadata
        self.peers: set[str] = set()  # the client addresses calls came from: one per connection
        self.cancelled = threading.Event()  # a call's client went away (Slow)
        self.sent = 0  # messages Firehose managed to hand to grpcio
        self.lock = threading.Lock()
        handlers = {
            "Unary": grpc.unary_unary_rpc_method_handler(self.unary),
            "ServerStream": grpc.unary_stream_rpc_method_handler(self.server_stream),
            "ClientStream": grpc.stream_unary_rpc_method_handler(self.client_stream),
            "Bidi": grpc.stream_stream_rpc_method_handler(self.bidi),
            "Slow": grpc.unary_unary_rpc_method_handler(self.slow),
            "Firehose": grpc.unary_stream_rpc_method_handler(self.firehose),
            "Nap": grpc.unary_unary_rpc_method_handler(self.nap),
        }
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=32), options=options)
        self.serving = True  # what grpc.health.v1's Check answers: SERVING or NOT_SERVING
        self.checks = 0  # health checks answered
        health = {"Check": grpc.unary_unary_rpc_method_handler(self.check)}
        self.server.add_generic_rpc_handlers(
            (
                grpc.method_handlers_generic_handler(SERVICE, handlers),
                grpc.method_handlers_generic_handler("grpc.health.v1.Health", health),
            )
        )
        if tls is None:
            self.port = self.server.add_insecure_port("127.0.0.1:0")
            self.url = f"h2c://127.0.0.1:{self.port}"
        else:
            cert, key = tls
            creds = grpc.ssl_server_credentials([(key, cert)])
            self.port = self.server.add_secure_port("127.0.0.1:0", creds)
            self.url = f"https://127.0.0.1:{self.port}"
        self.server.start()

    def stop(self) -> None:
        self.server.stop(grace=None)

    def _seen(self, context: grpc.ServicerContext) -> None:
        with self.lock:
            self.metadata.append({k: v for k, v in context.invocation_metadata()})
            self.peers.add(context.peer())

    # -- the methods -------------------------------------------------------------

    def check(self, request: bytes, context: grpc.ServicerContext) -> bytes:
        """grpc.health.v1.Health/Check of the whole server (an empty request): a
        HealthCheckResponse, field 1 (status) 1 SERVING or 2 NOT_SERVING."""
        with self.lock:
            self.checks += 1
        if request:
            context.abort(grpc.StatusCode.NOT_FOUND, "only the server as a whole")
        return b"\x08\x01" if self.serving else b"\x08\x02"

    def unary(self, request: bytes, context: grpc.ServicerContext) -> bytes:
        """The request back, prefixed; ``fail:<message>`` aborts with INVALID_ARGUMENT."""
        self._seen(context)
        if request.startswith(b"fail:"):
            context.set_trailing_metadata((("x-why", "asked"),))
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, request[5:].decode())
        context.set_trailing_metadata((("x-trailer", "t1"),))
        return b"echo:" + request

    def server_stream(self, request: bytes, context: grpc.ServicerContext):
        """``int(request)`` messages: b"0", b"1", ..."""
        self._seen(context)
        for i in range(int(request)):
            yield b"%d" % i

    def client_stream(self, requests, context: grpc.ServicerContext) -> bytes:
        self._seen(context)
        return b"|".join(requests)

    def bidi(self, requests, context: grpc.ServicerContext):
        self._seen(context)
        for message in requests:
            yield message.upper()

    def nap(self, request: bytes, context: grpc.ServicerContext) -> bytes:
        """Answers after ``float(request)`` seconds (at most WAIT)."""
        self._seen(context)
        time.sleep(min(float(request), WAIT))
        return b"rested"

    def slow(self, request: bytes, context: grpc.ServicerContext) -> bytes:
        """Waits for its client to go (records it) or WAIT seconds."""
        self._seen(context)
        deadline = time.monotonic() + WAIT
        while context.is_active() and time.monotonic() < deadline:
            time.sleep(0.02)
        if not context.is_active():
            self.cancelled.set()
        return b"late"

    def firehose(self, request: bytes, context: grpc.ServicerContext):
        """``int(request)`` messages of 64 KiB, as fast as the stream takes them."""
        self._seen(context)
        chunk = b"x" * 65536
        for _ in range(int(request)):
            if not context.is_active():
                self.cancelled.set()
                return
            with self.lock:
                self.sent += 1
            yield chunk


def stub(channel: grpc.Channel, method: str, kind: str = "unary_unary"):
    """A callable for ``/edge.test.Echo/<method>`` on ``channel``, bytes both ways."""
    return getattr(channel, kind)(f"/{SERVICE}/{method}")
