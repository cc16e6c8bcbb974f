"""The README's demo, as a user runs it: `edge demo` on the bundled configuration."""

from __future__ import annotations

import json
import socket
import time

import pytest

from tests.harness import Proc, get

DEMO_PORTS = (8000, 8080, 9101, 9102, 9103, 9104)


def _free(port: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def test_demo_routes_hosts_and_prefix():
    busy = [p for p in DEMO_PORTS if not _free(p)]
    if busy:
        pytest.skip(f"the demo's fixed ports {busy} are in use on this machine")
    demo = Proc(["demo"])
    try:
        deadline = time.monotonic() + 15
        while get(8080, "/ready")[0] != 200:
            assert time.monotonic() < deadline, demo.log
            time.sleep(0.1)
        names = [json.loads(get(8000, "/", host="a.localhost")[2])["name"] for _ in range(8)]
        assert sorted(set(names)) == ["app-a-1", "app-a-2"]
        assert names.count("app-a-1") == 6  # weights 3:1
        assert json.loads(get(8000, "/", host="b.localhost")[2])["name"] == "app-b-1"
        api = json.loads(get(8000, "/api/users")[2])
        assert api["name"] == "api-1" and api["path"] == "/users"
        assert get(8000, "/", host="nothing.localhost")[0] == 404
        assert get(8080, "/ping")[0] == 200
    finally:
        assert demo.stop() == 0, demo.log
    for port in DEMO_PORTS:  # edge and every whoami it started are gone
        deadline = time.monotonic() + 5
        while not _free(port) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _free(port), f"port {port} still bound after the demo stopped"
