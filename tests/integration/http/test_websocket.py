"""WebSocket through edge: the Upgrade becomes a byte tunnel in both directions."""

from __future__ import annotations

import asyncio
import threading

import pytest

websockets = pytest.importorskip("websockets", reason="pip install websockets (in the test extra)")
from websockets.asyncio.client import connect  # noqa: E402
from websockets.asyncio.server import serve  # noqa: E402

from tests.harness import Edge, lb  # noqa: E402


@pytest.fixture(scope="module")
def ws_backend():
    """A real WebSocket echo server (the websockets library) in a thread."""
    ready = threading.Event()
    state = {}

    async def echo(ws):
        async for message in ws:
            await ws.send(message)

    async def main():
        async with serve(echo, "127.0.0.1", 0) as server:
            state["port"] = server.sockets[0].getsockname()[1]
            state["stop"] = asyncio.get_running_loop().create_future()
            state["loop"] = asyncio.get_running_loop()
            ready.set()
            await state["stop"]

    t = threading.Thread(target=lambda: asyncio.run(main()), daemon=True)
    t.start()
    assert ready.wait(5)
    yield state["port"]
    state["loop"].call_soon_threadsafe(state["stop"].set_result, None)
    t.join(5)


def test_websocket_echo_through_tunnel(tmp_path, parser, ws_backend):
    dyn = {
        "http": {
            "routers": {"ws": {"rule": "PathPrefix(`/chat`)", "service": "ws"}},
            "services": {"ws": lb(f"http://127.0.0.1:{ws_backend}")},
        }
    }
    e = Edge(tmp_path, dyn, parser=parser)

    async def client():
        async with connect(f"ws://127.0.0.1:{e.port}/chat", open_timeout=5) as ws:
            replies = []
            for i in range(50):
                await ws.send(f"message {i}")
                replies.append(await asyncio.wait_for(ws.recv(), 5))
            big = b"\x00\xff" * 300_000
            await ws.send(big)
            assert await asyncio.wait_for(ws.recv(), 10) == big
            return replies

    try:
        replies = asyncio.run(client())
        assert replies == [f"message {i}" for i in range(50)]
    finally:
        e.stop()
