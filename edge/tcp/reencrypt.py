"""Dialing a TCP server over TLS (``servers[].tls: true``) and splicing a client to it.

Owns :func:`dial_tls_splice`, the TLS counterpart of
:func:`edge.tcp.splice.dial_splice`: connect, write the PROXY protocol header in
the clear (as Traefik's dialer does: the header is for the server's TCP stack,
before its TLS), run the client side of the handshake with the serversTransport's
context (:func:`edge.tls.terminate.connect_tls`: edge's own TLS transport, the
terminator's, as a client), then splice the client to the TLS stream. The bytes
already read from the client (peeked ones) go to the server inside TLS.

Invariants:
- The whole dial (connect and handshake) is bounded by ``timeout`` (None: no
  bound); on any failure the raw connection is aborted and :class:`DialError`
  names the address and the reason; the client is left parked for the caller.
- Nothing the server sends is lost: bytes decrypted before the splice exists
  are held by the upstream's :class:`Pending` and replayed first.
- Half-close as a plain splice has it, under TLS 1.3: the client's EOF reaches
  the server as close_notify (and FIN) while the server's answer keeps coming
  until it ends or ``termination_delay`` passes; the server's close_notify
  reaches the client as EOF while the client may go on sending. (asyncio's
  ``loop.start_tls`` transports cannot half-close: a client's EOF used to end
  both directions at once.) TLS 1.2 has no half-close: an EOF either way
  closes both, gracefully.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Callable

from edge.tcp.splice import (
    DIAL_KEEP_ALIVE,
    TERMINATION_DELAY,
    DialError,
    Pending,
    Splice,
    keep_alive,
    splice,
    unresolvable,
)
from edge.tls.terminate import connect_tls

__all__ = ["dial_tls_splice"]


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
    keep_alive_period: float = DIAL_KEEP_ALIVE,
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
    upstream = Pending()  # connection_made once the handshake is done; keeps what comes first
    try:
        async with asyncio.timeout(timeout):
            raw, _ = await loop.create_connection(asyncio.Protocol, host, port)
            keep_alive(raw, keep_alive_period)
            if header:
                raw.write(header)
            # No bound of its own when the dial has one (asyncio's start_tls: 60 s).
            await connect_tls(
                raw,
                context,
                upstream,
                server_hostname or host,
                handshake_timeout=0 if timeout is not None else 60.0,
            )
    except TimeoutError:
        if raw is not None:
            raw.abort()
        raise DialError(
            f"dial {host}:{port} (tls): no TLS connection within {timeout:g}s"
        ) from None
    except ssl.SSLError as exc:
        if raw is not None:
            raw.abort()
        raise DialError(f"dial {host}:{port} (tls): handshake failed: {exc.reason or exc}") from exc
    except (OSError, ConnectionError) as exc:
        if raw is not None:
            raw.abort()
        raise DialError(f"dial {host}:{port} (tls): {exc.strerror or exc}") from exc
    except ValueError as exc:  # a host name the resolver (or ssl, as a server name) refuses
        if raw is not None:
            raw.abort()
        raise DialError(f"dial {host}:{port} (tls): {unresolvable(exc)}") from exc
    return splice(
        held, upstream, a_to_b=first, termination_delay=termination_delay, on_close=on_close
    )
