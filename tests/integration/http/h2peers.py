"""The peers of the HTTP/2 integration tests.

- :class:`RawH2`: h2's client state machine on a real socket (plain, or TLS with
  ALPN h2), sending what a test scripts, raw frames h2 would refuse to make
  included. Every read is bounded by a timeout, every loop by a count; a
  connection the server closed reads as ``closed``.
- :class:`Firehose`: an HTTP/1.1 backend that sends a large body as fast as its
  socket takes it, counting what it managed to send.
- :func:`rss`: a process's resident memory.
"""

from __future__ import annotations

import socket
import ssl
import threading
import time
from pathlib import Path

import h2.config
import h2.connection
import h2.events
import h2.exceptions
from h2.errors import ErrorCodes

from tests.integration.peers import ThreadedServer, read_request

TIMEOUT = 10.0


class Response:
    """One stream's answer as the client saw it."""

    def __init__(self) -> None:
        self.headers: dict[bytes, bytes] = {}
        self.body = bytearray()
        self.ended = False
        self.reset: int | None = None  # the RST_STREAM error code, when reset
        self.interim: list[dict[bytes, bytes]] = []  # 1xx heads before the response
        self.trailers: list[tuple[bytes, bytes]] | None = None  # a HEADERS after the data

    @property
    def status(self) -> int:
        return int(self.headers.get(b":status", b"0"))


class RawH2:
    """An HTTP/2 client connection to 127.0.0.1:``port``.

    ``ca``: speak TLS (ALPN h2) and verify against this CA file, for ``server_name``.
    ``settings``: the client's SETTINGS beyond h2's defaults. ``auto_ack``: give back
    window for every DATA received (a reader); False leaves windows to the test.
    ``checked``: h2 checks and normalizes the header lists sent; False sends them as
    given (malformed ones).
    """

    def __init__(
        self,
        port: int,
        *,
        ca: str | None = None,
        server_name: str = "a.test",
        settings: dict | None = None,
        auto_ack: bool = True,
        timeout: float = TIMEOUT,
        checked: bool = True,
    ) -> None:
        sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        if ca is not None:
            ctx = ssl.create_default_context(cafile=ca)
            ctx.set_alpn_protocols(["h2"])
            sock = ctx.wrap_socket(sock, server_hostname=server_name)
            assert sock.selected_alpn_protocol() == "h2"
        self.sock = sock
        self.h2 = h2.connection.H2Connection(
            h2.config.H2Configuration(
                client_side=True,
                header_encoding=None,
                validate_outbound_headers=checked,
                normalize_outbound_headers=checked,
            )
        )
        self.h2.initiate_connection()
        if settings:
            self.h2.update_settings(settings)
        self.auto_ack = auto_ack
        self.responses: dict[int, Response] = {}
        self.terminated: h2.events.ConnectionTerminated | None = None
        self.closed = False  # the server closed (EOF or reset read)
        self.refused = False  # a write failed: the server is closing
        self.remote_settings: dict = {}
        self.flush()

    # -- writing -----------------------------------------------------------------------

    def flush(self) -> bool:
        """Send what h2 queued; False when the server is gone."""
        data = self.h2.data_to_send()
        return self.send_raw(data) if data else not (self.closed or self.refused)

    def send_raw(self, data: bytes) -> bool:
        if self.refused:
            return False
        try:
            self.sock.sendall(data)
        except OSError:
            self.refused = True
            return False
        return True

    def request(
        self,
        path: bytes = b"/",
        *,
        authority: bytes = b"a.test",
        method: bytes = b"GET",
        headers: list[tuple[bytes, bytes]] | tuple = (),
        body: bytes | None = None,
        end: bool = True,
        flush: bool = True,
    ) -> int:
        """Open a stream; with ``body`` it is sent (as the windows allow, see ``send_body``)."""
        sid = self.h2.get_next_available_stream_id()
        self.responses[sid] = Response()
        self.h2.send_headers(
            sid,
            [
                (b":method", method),
                (b":scheme", b"http"),
                (b":authority", authority),
                (b":path", path),
                *headers,
            ],
            end_stream=end and body is None,
        )
        if flush:
            self.flush()
        if body is not None:
            self.send_body(sid, body, end=end)
        return sid

    def send_body(self, sid: int, body: bytes, end: bool = True, timeout: float = TIMEOUT) -> None:
        """Send ``body`` on ``sid`` as the server's windows open (reading meanwhile)."""
        view = memoryview(body)
        deadline = time.monotonic() + timeout
        while view and time.monotonic() < deadline and not (self.closed or self.refused):
            window = min(self.h2.local_flow_control_window(sid), self.h2.max_outbound_frame_size)
            if window <= 0:
                self.read(0.2)
                continue
            self.h2.send_data(sid, bytes(view[:window]))
            view = view[window:]
            self.flush()
        assert not view, f"stream {sid}: {len(view)} bytes of body not sent within {timeout}s"
        if end:
            self.h2.end_stream(sid)
            self.flush()

    # -- reading -----------------------------------------------------------------------

    def read(self, timeout: float = TIMEOUT) -> list[h2.events.Event]:
        """One read from the socket (waiting up to ``timeout``), its events handled."""
        if self.closed:
            return []
        self.sock.settimeout(timeout)
        try:
            data = self.sock.recv(1 << 20)
        except (TimeoutError, BlockingIOError, ssl.SSLWantReadError):
            return []
        except OSError:
            self.closed = True
            return []
        if not data:
            self.closed = True
            return []
        events = self.h2.receive_data(data)
        for event in events:
            sid = getattr(event, "stream_id", None)
            response = self.responses.get(sid) if sid else None
            if isinstance(event, h2.events.ResponseReceived) and response is not None:
                response.headers = dict(event.headers)
            elif (
                isinstance(event, h2.events.InformationalResponseReceived) and response is not None
            ):
                response.interim.append(dict(event.headers))
            elif isinstance(event, h2.events.TrailersReceived) and response is not None:
                response.trailers = list(event.headers)
            elif isinstance(event, h2.events.DataReceived):
                if response is not None:
                    response.body += event.data
                if self.auto_ack and event.flow_controlled_length:
                    self.h2.acknowledge_received_data(event.flow_controlled_length, sid)
            elif isinstance(event, h2.events.StreamEnded) and response is not None:
                response.ended = True
            elif isinstance(event, h2.events.StreamReset) and response is not None:
                response.reset = event.error_code
            elif isinstance(event, h2.events.ConnectionTerminated):
                self.terminated = event
            elif isinstance(event, h2.events.RemoteSettingsChanged):
                self.remote_settings.update(
                    {code: s.new_value for code, s in event.changed_settings.items()}
                )
        self.flush()
        return events

    def response(self, sid: int, timeout: float = TIMEOUT) -> Response:
        """Read until stream ``sid`` ended (or was reset, or the connection ended)."""
        response = self.responses[sid]
        deadline = time.monotonic() + timeout
        while (
            not response.ended
            and response.reset is None
            and self.terminated is None
            and not self.closed
            and time.monotonic() < deadline
        ):
            self.read(max(0.05, deadline - time.monotonic()))
        return response

    def get(self, path: bytes = b"/", timeout: float = TIMEOUT, **kw) -> Response:
        return self.response(self.request(path, **kw), timeout)

    def goaway(self, timeout: float = TIMEOUT) -> h2.events.ConnectionTerminated | None:
        """Read until the server's GOAWAY (or its close): the GOAWAY, if one came."""
        deadline = time.monotonic() + timeout
        while self.terminated is None and not self.closed and time.monotonic() < deadline:
            try:
                self.read(max(0.05, deadline - time.monotonic()))
            except h2.exceptions.ProtocolError:
                break  # frames after the GOAWAY that h2 will not take: the GOAWAY is read
        return self.terminated

    def closed_by_server(self, timeout: float = TIMEOUT) -> bool:
        """Whether the server closes the connection within ``timeout`` (read until EOF)."""
        deadline = time.monotonic() + timeout
        self.sock.settimeout(0.2)
        while time.monotonic() < deadline:
            try:
                if not self.sock.recv(1 << 20):
                    return True
            except TimeoutError:
                continue
            except OSError:
                return True
        return False

    def close(self) -> None:
        try:
            self.h2.close_connection(ErrorCodes.NO_ERROR)
            self.flush()
        except h2.exceptions.H2Error:
            pass
        self.sock.close()

    def __enter__(self) -> RawH2:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Firehose(ThreadedServer):
    """An HTTP/1.1 backend answering each request with ``size`` bytes as fast as its
    socket takes them, counting what it managed to send (``sent``)."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.sent = 0
        self.lock = threading.Lock()
        super().__init__()

    def _serve(self, c: socket.socket, n: int) -> None:
        c.settimeout(5)
        try:
            if read_request(c) is None:
                return
            c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % self.size)
            chunk = b"f" * 65536
            left = self.size
            c.settimeout(0.2)
            deadline = time.monotonic() + 180  # over the 120 s a test waits for all of it
            while left and not self.stopped and time.monotonic() < deadline:
                try:
                    sent = c.send(chunk[: min(left, len(chunk))])
                except TimeoutError:
                    continue  # edge is not reading: try again
                left -= sent
                with self.lock:
                    self.sent += sent
        except OSError:
            pass
        finally:
            c.close()

    def settled(self, quiet: float = 1.0, timeout: float = 30.0) -> int:
        """``sent`` once it has not moved for ``quiet`` seconds (edge reads no more);
        fails if it still moves after ``timeout`` seconds. A wait on the condition, so a
        loaded machine that takes long to fill the buffers does not fail it."""
        deadline = time.monotonic() + timeout
        with self.lock:
            last = self.sent
        while True:
            time.sleep(quiet)
            with self.lock:
                now = self.sent
            if now == last:
                return now
            assert time.monotonic() < deadline, f"the backend still sends: {now} bytes"
            last = now


def rss(pid: int) -> int:
    """Resident memory of process ``pid``, bytes."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmRSS for {pid}")
