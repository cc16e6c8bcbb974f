"""Dialing a TCP server over TLS (``servers[].tls: true``) and splicing a client to it.

Owns :func:`dial_tls_splice`, the TLS counterpart of
:func:`edge.tcp.splice.dial_splice`: connect, write the PROXY protocol header in
the clear (as Traefik's dialer does: the header is for the server's TCP stack,
before its TLS), run the client side of the handshake with the serversTransport's
context (``loop.start_tls``), then splice the client to the TLS stream. The
bytes already read from the client (peeked ones) go to the server inside TLS.

Invariants:
- The whole dial (connect and handshake) is bounded by ``timeout`` (None: no
  bound); on any failure the raw connection is aborted and :class:`DialError`
  names the address and the reason; the client is left parked for the caller.
- Nothing the server sends is lost: bytes decrypted before the splice exists
  are held by the upstream's :class:`Pending` and replayed first.

Known limit: asyncio's TLS transports cannot half-close (``can_write_eof()`` is
false), so a client's EOF ends both directions of such a splice, gracefully
(what is buffered is written) but without waiting for the server's answer.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Callable

from edge.tcp.splice import TERMINATION_DELAY, DialError, Pending, Splice, splice

__all__ = ["dial_tls_splice"]


class _Upstream(Pending):
    """The upstream's holder: its TLS transport is known only once ``start_tls`` returns."""

    __slots__ = ()

    def data_received(self, data: bytes) -> None:
        self.data.append(data)
        if self.transport is not None:
            self.transport.pause_reading()


async def dial_tls_splice(
    client: asyncio.Transport | Pending,
    host: str,
    port: int,
    *,
    context: ssl.SSLContext,
    server_hostname: str,
    header: bytes = b"",
    first: bytes = b"",
    timeout: float | None = None,
    termination_delay: float = TERMINATION_DELAY,
    on_close: Callable[[Splice], None] | None = None,
) -> Splice:
    """Dial ``host:port``, speak TLS to it, splice ``client`` to it (``a``: client).

    ``header`` (a PROXY protocol header) goes before the handshake, ``first``
    inside TLS before anything else. Raises :class:`DialError`.
    """
    loop = asyncio.get_running_loop()
    if isinstance(client, Pending):
        held = client
    else:
        old = client.get_protocol()
        held = old if isinstance(old, Pending) else Pending.attach(client)
    raw: asyncio.Transport | None = None
    upstream = _Upstream()
    try:
        async with asyncio.timeout(timeout):
            raw, _ = await loop.create_connection(asyncio.Protocol, host, port)
            if header:
                raw.write(header)
            tls = await loop.start_tls(raw, upstream, context, server_hostname=server_hostname or None)
    except TimeoutError:
        if raw is not None:
            raw.abort()
        raise DialError(f"dial {host}:{port} (tls): no TLS connection within {timeout:g}s") from None
    except ssl.SSLError as exc:
        if raw is not None:
            raw.abort()
        raise DialError(f"dial {host}:{port} (tls): handshake failed: {exc.reason or exc}") from exc
    except (OSError, ConnectionError) as exc:
        if raw is not None:
            raw.abort()
        raise DialError(f"dial {host}:{port} (tls): {exc.strerror or exc}") from exc
    upstream.transport = tls  # type: ignore[assignment]
    if upstream.data:
        tls.pause_reading()
    return splice(held, upstream, a_to_b=first, termination_delay=termination_delay, on_close=on_close)
