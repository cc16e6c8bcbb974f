"""edge.eventloop: uvloop imported with a transport table that costs no Python call.

Each case runs in a fresh interpreter (the test process has its own uvloop already).
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

from tests.harness import ROOT

PROBE = textwrap.dedent(
    """
    import asyncio, json, logging, socket, sys, weakref

    if sys.argv[1] == "edge":
        from edge.eventloop import import_uvloop
        uvloop = import_uvloop()
    else:
        import uvloop

    calls = {"weakref.py": 0}

    def profile(frame, event, arg):
        if event == "call" and frame.f_code.co_filename.endswith("weakref.py"):
            calls["weakref.py"] += 1

    class Echo(asyncio.Protocol):
        def connection_made(self, transport):
            self.transport = transport

        def data_received(self, data):
            self.transport.write(data)
            self.transport.close()

    async def main():
        loop = asyncio.get_running_loop()
        server = await loop.create_server(Echo, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        refused = None
        sys.setprofile(profile)
        for i in range(50):
            reader, writer = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port), 5)
            if i == 0:  # a live transport's descriptor: add_reader is refused, as before
                try:
                    loop.add_reader(writer.transport.get_extra_info("socket").fileno(), lambda: None)
                except RuntimeError as exc:
                    refused = str(exc)
            writer.write(b"x")
            assert await asyncio.wait_for(reader.read(), 5) == b"x"
            writer.close()
        sys.setprofile(None)
        server.close()
        return refused

    refused = uvloop.run(main())
    print(json.dumps({
        "weakref_calls": calls["weakref.py"],
        "refused": refused,
        "restored": weakref.WeakValueDictionary.__module__ == "weakref",
        "logging_handlers": type(logging._handlers).__name__,
    }))
    """
)


def probe(how: str) -> dict:
    out = subprocess.run(
        [sys.executable, "-c", PROBE, how], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_no_python_call_in_weakref_per_connection_and_the_guard_holds():
    plain, edge = probe("plain"), probe("edge")
    # uvloop's own table: Python calls in weakref.py for every transport (client and server side)
    assert plain["weakref_calls"] >= 100, plain
    assert edge["weakref_calls"] == 0, edge
    for result in (plain, edge):
        assert result["refused"] and "is used by transport" in result["refused"], result
        assert result["restored"] and result["logging_handlers"] == "WeakValueDictionary", result


def test_prune_every_is_ten_seconds_unless_the_environment_says_otherwise() -> None:
    from edge.eventloop import DEFAULT_PRUNE_EVERY, PRUNE_ENV, prune_every

    assert prune_every({}) == DEFAULT_PRUNE_EVERY == 10.0
    assert prune_every({PRUNE_ENV: " "}) == 10.0
    assert prune_every({PRUNE_ENV: "3"}) == 3.0
    assert prune_every({PRUNE_ENV: "0.5"}) == 0.5
    for bad in ("0", "-1", "inf", "nan", "x", "1e400"):
        try:
            prune_every({PRUNE_ENV: bad})
        except ValueError as exc:
            assert str(exc) == f"{PRUNE_ENV}={bad!r}: not a positive number of seconds"
        else:
            raise AssertionError(f"{PRUNE_ENV}={bad!r} was taken")
