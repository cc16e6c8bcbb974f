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


def test_websocket_holds_its_in_flight_req_slot_until_the_tunnel_closes(
    tmp_path, parser, ws_backend
):
    """inFlightReq (amount 1) in front of a WebSocket: as in Traefik, the upgraded
    connection keeps its slot while the tunnel lives, so a second one is refused with
    429, and the slot comes back once the first closes."""
    dyn = {
        "http": {
            "routers": {
                "ws": {"rule": "PathPrefix(`/chat`)", "service": "ws", "middlewares": ["one"]}
            },
            "services": {"ws": lb(f"http://127.0.0.1:{ws_backend}")},
            "middlewares": {"one": {"inFlightReq": {"amount": 1}}},
        }
    }
    e = Edge(tmp_path, dyn, parser=parser)
    url = f"ws://127.0.0.1:{e.port}/chat"

    async def refused() -> int:
        try:
            async with connect(url, open_timeout=5):
                return 101
        except websockets.InvalidStatus as exc:
            return exc.response.status_code

    async def client() -> tuple[int, int]:
        async with connect(url, open_timeout=5) as ws:
            await ws.send("hello")
            assert await asyncio.wait_for(ws.recv(), 5) == "hello"
            during = await refused()
            await ws.send("still here")
            assert await asyncio.wait_for(ws.recv(), 5) == "still here"
        # Closed: the slot comes back once edge sees both sides of the tunnel end.
        after = 0
        for _ in range(100):
            after = await refused()
            if after == 101:
                break
            await asyncio.sleep(0.05)
        return during, after

    try:
        assert asyncio.run(client()) == (429, 101)
    finally:
        e.stop()
