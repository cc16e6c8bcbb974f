"""What an entry point gives the HTTP routers on it (Traefik's entry point model), through
a real edge process, curl and whoami:

- ``http.middlewares``: run before each router's own, on that entry point only, with
  the router's provider qualifying a bare name; one missing disables the routers it
  would apply to (the log names the entry point), the rest keep serving;
- ``asDefault``: a router naming no ``entryPoints`` is served on the marked entry
  point, not on the others.
"""

from __future__ import annotations

import json
import subprocess

from tests.harness import Edge, lb, need

DYNAMIC = {
    "http": {
        "routers": {
            # no entryPoints: the asDefault one (web) only
            "app": {"rule": "PathPrefix(`/app`)", "service": "who", "middlewares": ["own"]},
            "both": {"rule": "PathPrefix(`/both`)", "service": "who", "entryPoints": ["web", "admin"]},
        },
        "middlewares": {
            # addPrefix shows the order: the entry point's runs first, so the router's
            # prefix ends up outermost
            "ep": {"addPrefix": {"prefix": "/ep"}},
            "mark": {"headers": {"customRequestHeaders": {"X-Mark": "entry-point"}}},
            "own": {"addPrefix": {"prefix": "/own"}},
        },
    }
}  # fmt: skip


def curl(port: int, path: str) -> tuple[int, dict]:
    """(status, whoami's JSON or {}) of a GET through edge with curl."""
    out = subprocess.run(
        [need("curl"), "-sS", "-m", "10", "-w", "\n%{http_code}", f"http://127.0.0.1:{port}{path}"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert out.returncode == 0, out.stderr
    body, _, status = out.stdout.rpartition("\n")
    return int(status), json.loads(body) if status == "200" else {}


def test_entry_point_middlewares_and_as_default_through_edge(tmp_path, whoami):
    dynamic = json.loads(json.dumps(DYNAMIC))
    dynamic["http"]["services"] = {"who": lb(whoami.url)}
    eps = {
        "web": {
            "address": "127.0.0.1:0",
            "asDefault": True,
            "http": {"middlewares": ["ep", "mark@file"]},
        },
        "admin": {"address": "127.0.0.1:0"},
    }
    e = Edge(tmp_path, dynamic, entrypoints=eps)
    try:
        web, admin = e.ports["web"], e.ports["admin"]
        status, seen = curl(web, "/app/x")
        assert status == 200 and seen["path"] == "/own/ep/app/x"
        assert seen["headers"]["X-Mark"] == ["entry-point"]
        # asDefault: the router naming no entry point is not on admin
        assert curl(admin, "/app/x")[0] == 404
        # a router on both: the entry point's middlewares on web only
        status, seen = curl(web, "/both")
        assert status == 200 and seen["path"] == "/ep/both" and "X-Mark" in seen["headers"]
        status, seen = curl(admin, "/both")
        assert status == 200 and seen["path"] == "/both" and "X-Mark" not in seen["headers"]

        # The entry point's middleware gone: its routers there are disabled, saying why;
        # the same router on admin keeps serving.
        del dynamic["http"]["middlewares"]["mark"]
        applied = e.applied()
        e.write_dynamic(dynamic)
        e.wait_applied(applied + 1)
        assert curl(web, "/app/x")[0] == 404
        assert curl(web, "/both")[0] == 404
        assert curl(admin, "/both")[0] == 200
        e.wait_for(
            r"router app@file: middleware 'mark@file' \(entryPoints\.web\.http\.middlewares\) "
            r"does not exist"
        )
        e.wait_for(r"router web-both@file: middleware 'mark@file' \(entryPoints\.web")
    finally:
        e.stop()
