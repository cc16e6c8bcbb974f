"""sanitizePath end to end (issue 12 item 4), under both codecs: a request path is
routed, and reaches the backend, with its dot segments resolved and its empty ones
dropped, so ``/x/../admin`` cannot reach a catch-all router's backend (which would
resolve it to ``/admin`` itself) past the gate of the ``/admin`` routers; a
request-target with a fragment (``#``) is refused.

Edge has no basicAuth or HTTP ipAllowList; the gate here is what it has: a
higher-priority ``PathPrefix(`/admin`) && !ClientIP(...)`` router to a service with
no server (503, as an ipAllowList refusal would answer 403), and a headers
middleware on the router that admits. ``edge whoami`` echoes the raw target it got.
"""

from __future__ import annotations

import json
import socket

import pytest

from tests.harness import Edge, lb, raw, read_until_closed


def dynamic(whoami, whoami2) -> dict:
    return {
        "http": {
            "routers": {
                "public": {"rule": "Host(`site.test`)", "service": "public", "priority": 1},
                "deny": {
                    "rule": "Host(`site.test`) && PathPrefix(`/admin`) && !ClientIP(`10.0.0.0/8`)",
                    "service": "closed",
                    "priority": 30,
                },
                "admin": {
                    "rule": "Host(`site.test`) && PathPrefix(`/admin`)",
                    "service": "admin",
                    "middlewares": ["gate"],
                    "priority": 20,
                },
                "api": {
                    "rule": "Host(`api.test`) && PathPrefix(`/api`)",
                    "service": "public",
                    "middlewares": ["strip"],
                },
                "express": {
                    "rule": "Host(`express.test`)",
                    "service": "public",
                },  # host alone: the express path
            },
            "middlewares": {
                "gate": {"headers": {"customRequestHeaders": {"X-Gate": "admin"}}},
                "strip": {"stripPrefix": {"prefixes": ["/api"]}},
            },
            "services": {
                "public": lb(whoami.url),
                "admin": lb(whoami2.url),
                "closed": {"loadBalancer": {"servers": []}},
            },
        }
    }


def send(port: int, target: bytes, host: bytes, *, count: int = 1) -> list[tuple[int, dict]]:
    """``count`` requests for ``target`` on one keep-alive connection (the last closes):
    (status, whoami's JSON or {}) of each."""
    head = b"GET " + target + b" HTTP/1.1\r\nHost: " + host + b"\r\n"
    data = b""
    for i in range(count):
        data += head + (b"Connection: close\r\n" if i == count - 1 else b"") + b"\r\n"
    out = []
    rest = raw(port, data)
    while rest:
        top, _, rest = rest.partition(b"\r\n\r\n")
        status = int(top.split(b" ", 2)[1])
        length = next(
            (
                int(line.split(b":")[1])
                for line in top.split(b"\r\n")
                if line.lower().startswith(b"content-length:")
            ),
            0,
        )
        body, rest = rest[:length], rest[length:]
        out.append((status, json.loads(body) if body.startswith(b"{") else {}))
    assert len(out) == count, out
    return out


@pytest.fixture(scope="module", params=["httptools", "h11"])
def edge(request, tmp_path_factory, whoami, whoami2):
    """One edge per codec for the tests that only send it requests (its routes never
    change); the others start their own, differently configured."""
    tmp = tmp_path_factory.mktemp(f"sanitize-{request.param}")
    e = Edge(tmp, dynamic(whoami, whoami2), parser=request.param)
    yield e
    e.stop()


BYPASSES = [
    b"/x/../admin",
    b"/x/%2e%2e/admin",
    b"/x/.%2E/admin",
    b"/../admin",
    b"//admin",
    b"/./admin",
    b"/admin/./",
    b"/x/..//admin/../admin/",
    b"http://site.test/x/../admin",  # absolute-form
]


@pytest.mark.parametrize("target", BYPASSES)
def test_a_dotted_path_does_not_get_past_the_gate_of_admin(edge, target):
    assert send(edge.port, b"/admin", b"site.test")[0][0] == 503  # the gate, spelled plainly
    assert send(edge.port, b"/public", b"site.test")[0][1]["name"] == "w1"
    for status, info in send(edge.port, target, b"site.test", count=2):
        assert status == 503, (target, info)  # before: 200 from the public backend, path as sent


@pytest.mark.parametrize("target", [b"/admin/x#/../../public", b"/public#x", b"/p?q#r"])
def test_a_fragment_is_refused(edge, target):
    """A backend that cuts the fragment off would get ``/admin/x`` where edge routed
    ``/public`` (the path cleaned with the fragment in it): refused, on a host-only
    (express) route too. Traefik refuses a fragment in the path (denyFragment)."""
    for host in (b"site.test", b"express.test"):
        resp = raw(edge.port, b"GET " + target + b" HTTP/1.1\r\nHost: " + host + b"\r\n\r\n")
        assert resp.startswith(b"HTTP/1.1 400 ") and resp.count(b"HTTP/1.1") == 1, (
            host,
            target,
            resp[:300],
        )


def answer_then_eof(port: int, data: bytes, timeout: float = 5.0) -> tuple[bytes, bool]:
    """Send ``data`` on a new connection; (what came back, whether edge closed the
    connection after it rather than leaving it open until ``timeout``)."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(data)
        return read_until_closed(s, timeout)


@pytest.mark.parametrize(
    "head",
    [
        b"GET /public#x HTTP/1.1\r\nHost: express.test\r\n\r\n",  # a fragment
        b"GET /p HTTP/1.1\r\nHost: app.example:@evil.example\r\n\r\n",  # a malformed Host
    ],
)
def test_a_malformed_request_gets_400_and_the_connection_closes(edge, head):
    # The project's rule for bad input: a 4xx, then the connection closes (as Go's
    # server does for a request it cannot parse); it stayed open, idle, before.
    answer, closed = answer_then_eof(edge.port, head)
    assert answer.startswith(b"HTTP/1.1 400 ") and b"Connection: close\r\n" in answer, answer
    assert closed


def test_the_backend_receives_the_cleaned_path_and_the_query_as_sent(edge):
    for target, path, query in [
        (b"/a/./b//c/../d?q=/../x//y", "/a/b/d", "q=/../x//y"),
        (b"/a/..%2Fb/", "/a/..%2Fb/", ""),  # an encoded slash is kept, not a separator
        (b"/p/%2e%2e/q/", "/q/", ""),
        (b"/.well-known/x", "/.well-known/x", ""),
        (b"/x/..\\admin?a\\b", "/x/..%5Cadmin", "a\\b"),  # a backslash in the path goes escaped
    ]:
        for host in (
            b"site.test",
            b"express.test",
        ):  # a path rule's route, and a host-only (express) one
            for status, info in send(edge.port, target, host, count=3):
                assert status == 200 and (info["path"], info["query"]) == (path, query), (
                    host,
                    target,
                    info,
                )


def test_the_admitted_admin_route_and_middlewares_see_the_cleaned_path(
    tmp_path, parser, whoami, whoami2
):
    conf = dynamic(whoami, whoami2)
    conf["http"]["routers"]["deny"]["rule"] = (
        "Host(`site.test`) && PathPrefix(`/admin`) && !ClientIP(`127.0.0.1`)"
    )
    e = Edge(tmp_path, conf, parser=parser)
    try:
        for status, info in send(e.port, b"/x/../admin/./users", b"site.test", count=2):
            assert status == 200 and info["name"] == "w2" and info["path"] == "/admin/users"
            assert info["headers"]["X-Gate"] == ["admin"]
        status, info = send(e.port, b"/api/../api//v1/./items", b"api.test")[0]
        assert status == 200 and info["path"] == "/v1/items"  # cleaned, then stripPrefix
    finally:
        e.stop()


def test_sanitize_path_false_routes_and_forwards_the_path_as_sent(
    tmp_path, parser, whoami, whoami2
):
    eps = {"web": {"address": "127.0.0.1:0", "http": {"sanitizePath": False}}}
    e = Edge(tmp_path, dynamic(whoami, whoami2), parser=parser, entrypoints=eps)
    try:
        for target in (b"/x/../admin", b"//admin", b"/x/%2e%2e/admin", b"/x/..\\admin"):
            for host in (b"site.test", b"express.test"):
                for status, info in send(e.port, target, host, count=2):
                    assert (
                        status == 200 and info["name"] == "w1" and info["path"] == target.decode()
                    ), info
        assert send(e.port, b"/admin", b"site.test")[0][0] == 503
    finally:
        e.stop()
