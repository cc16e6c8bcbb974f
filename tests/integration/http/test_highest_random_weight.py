"""``highestRandomWeight`` services through a live edge, clients on real sockets.

Each client is a distinct source address on the loopback network (Linux answers
every 127/8 address), so edge sees 1,000 clients as Traefik would: by the address
of the connection, never by X-Forwarded-For. The children are whoami servers that
answer with their name.
"""

from __future__ import annotations

import http.client
import json
from collections import Counter

import pytest

from tests.harness import Edge, Whoami, lb

CLIENTS = 1000


def client_address(i: int) -> str:
    return f"127.0.{1 + i // 250}.{1 + i % 250}"


@pytest.fixture(scope="module")
def edge(tmp_path_factory):
    backends = {name: Whoami(name) for name in ("appv1", "appv2")}
    dynamic = {
        "http": {
            "routers": {"app": {"rule": "Host(`app.test`)", "service": "app"}},
            "services": {
                "app": {
                    "highestRandomWeight": {
                        "services": [
                            {"name": "appv1", "weight": 1},
                            {"name": "appv2", "weight": 3},
                        ]
                    }
                },
                **{name: lb(b.url) for name, b in backends.items()},
            },
        }
    }
    e = Edge(tmp_path_factory.mktemp("hrw"), dynamic)
    yield e
    e.stop()
    for b in backends.values():
        b.stop()


def served_by(port: int, source: str, headers: dict | None = None) -> str:
    """The child that answered one request from ``source`` on a new connection."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=15, source_address=(source, 0))
    try:
        conn.request("GET", "/", headers={"Host": "app.test", **(headers or {})})
        resp = conn.getresponse()
        body = resp.read()
        assert resp.status == 200, (resp.status, body)
        return json.loads(body)["name"]
    finally:
        conn.close()


def test_each_client_keeps_its_service_and_weights_share_the_clients(edge):
    first = {i: served_by(edge.port, client_address(i)) for i in range(CLIENTS)}
    shares = Counter(first.values())
    # 3/4 of the clients for weight 3 of 4 (binomial: sigma about 14 clients).
    assert 680 <= shares["appv2"] <= 820, shares
    assert shares["appv1"] + shares["appv2"] == CLIENTS
    again = {i: served_by(edge.port, client_address(i)) for i in range(0, CLIENTS, 5)}
    assert again == {i: first[i] for i in again}


def test_the_connections_address_chooses_not_x_forwarded_for(edge):
    source = client_address(7)
    expected = served_by(edge.port, source)
    others = {
        served_by(edge.port, source, {"X-Forwarded-For": client_address(i)}) for i in range(40)
    }
    assert others == {expected}
