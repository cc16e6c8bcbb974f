"""The ceiling: the least a uvloop + httptools proxy can do per request.

Not a proxy anyone should run: one fixed backend, one upstream connection per
client connection, no routing, no header editing, no validation beyond llhttp,
one request in flight (no pipelining). It forwards each complete message's
bytes as they are. ``loadtest/bench.py`` measures it beside edge (subject
``ceiling``) to show how much of edge's per-request cost is Python doing
edge's job, and how much is the runtime itself.

    python loadtest/ceiling.py --listen 127.0.0.1:8001 --backend 127.0.0.1:8080
"""

from __future__ import annotations

import argparse
import asyncio
import ssl

import httptools
import uvloop


class Upstream(asyncio.Protocol):
    def __init__(self, client: Client) -> None:
        self.client = client
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpResponseParser(self)
        self.chunks: list[bytes] = []

    def connection_made(self, transport) -> None:
        self.transport = transport
        if self.client.waiting:
            transport.writelines(self.client.waiting)
            self.client.waiting = []

    def data_received(self, data: bytes) -> None:
        self.chunks.append(data)
        self.parser.feed_data(data)

    def on_message_complete(self) -> None:
        self.client.transport.writelines(self.chunks)
        self.chunks = []

    def connection_lost(self, exc) -> None:
        self.client.transport.close()


class Client(asyncio.Protocol):
    backend: tuple[str, int] = ("127.0.0.1", 80)

    def connection_made(self, transport) -> None:
        self.transport = transport
        self.waiting: list[bytes] = []
        self.chunks: list[bytes] = []
        self.parser = httptools.HttpRequestParser(self)
        self.upstream = Upstream(self)
        loop = asyncio.get_running_loop()
        self.dial = loop.create_task(loop.create_connection(lambda: self.upstream, *self.backend))

    def data_received(self, data: bytes) -> None:
        self.chunks.append(data)
        self.parser.feed_data(data)

    def on_message_complete(self) -> None:
        if self.upstream.transport is None:
            self.waiting += self.chunks
        else:
            self.upstream.transport.writelines(self.chunks)
        self.chunks = []

    def connection_lost(self, exc) -> None:
        if self.upstream.transport is not None:
            self.upstream.transport.close()


def split(addr: str) -> tuple[str, int]:
    host, _, port = addr.rpartition(":")
    return host, int(port)


async def main(listen: str, backend: str, cert: str | None = None, key: str | None = None) -> None:
    Client.backend = split(backend)
    loop = asyncio.get_running_loop()
    context = None
    if cert:
        # TLS by uvloop's own terminator (its Cython SSL protocol over ssl.SSLObject).
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(cert, key)
    server = await loop.create_server(Client, *split(listen), backlog=4096, ssl=context)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--listen", required=True)
    p.add_argument("--backend", required=True)
    p.add_argument("--cert", help="serve TLS with this certificate (PEM), terminated by uvloop")
    p.add_argument("--key", help="the certificate's key (PEM)")
    args = p.parse_args()
    uvloop.run(main(args.listen, args.backend, args.cert, args.key))
