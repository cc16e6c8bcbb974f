"""ipAllowList, ipWhiteList, rateLimit and inFlightReq through a real entrypoint under
both codecs, with ``edge whoami`` behind it and curl in front: different client
addresses are curl's ``--interface`` on loopback (127.0.0.2, 127.0.0.3: untrusted),
X-Forwarded-For comes from 127.0.0.1, which the entrypoint's forwardedHeaders
trusts. inFlightReq's slots come back when an exchange ends by a client's reset or
an upstream failure; a middleware with a bad value is disabled with its routers,
naming the key, while the rest serves."""

from __future__ import annotations

import socket
import struct
import subprocess
import time

import pytest

from tests.harness import Edge, lb, need

MIDDLEWARES = {
    "allow": {"ipAllowList": {"sourceRange": ["127.0.0.1", "127.0.0.2/32"]}},
    "allow-depth": {
        "ipAllowList": {
            "sourceRange": ["10.0.0.1", "2001:db8::/64"],
            "ipStrategy": {"depth": 2},
            "rejectStatusCode": 404,
        }
    },
    "allow-excluded": {
        "ipAllowList": {
            "sourceRange": ["192.0.2.1"],
            "ipStrategy": {"excludedIPs": ["10.0.0.0/8"]},
        }
    },
    "white": {"ipWhiteList": {"sourceRange": ["127.0.0.2"]}},
    "limit": {"rateLimit": {"average": 1, "period": "1m", "burst": 2}},
    "limit-user": {
        "rateLimit": {
            "average": 1,
            "period": "1m",
            "sourceCriterion": {"requestHeaderName": "X-User"},
        }
    },
    "limit-xff": {
        "rateLimit": {
            "average": 1,
            "period": "1m",
            "sourceCriterion": {"ipStrategy": {"depth": 1}},
        }
    },
    "one": {"inFlightReq": {"amount": 1}},
    "one-ip": {"inFlightReq": {"amount": 1, "sourceCriterion": {"ipStrategy": {}}}},
    "bad-range": {"ipAllowList": {"sourceRange": ["10.0.0.300"]}},
    "bad-average": {"rateLimit": {"average": -5}},
    "bad-depth": {"inFlightReq": {"amount": 1, "sourceCriterion": {"ipStrategy": {"depth": -1}}}},
}
ROUTERS = {
    "allow": (["allow"], "app"),
    "depth": (["allow-depth"], "app"),
    "excluded": (["allow-excluded"], "app"),
    "white": (["white"], "app"),
    "limit": (["limit"], "app"),
    "user": (["limit-user"], "app"),
    "xff": (["limit-xff"], "app"),
    "limit-twin": (["limit"], "app"),  # another router naming "limit"
    "one": (["one"], "app"),
    "slot": (["one-ip"], "app"),
    "slot-twin": (["one-ip"], "app"),  # another router naming "one-ip"
    "one-abort": (["one"], "app"),
    "one-down": (["one"], "down"),
    "bad-range": (["bad-range"], "app"),
    "bad-average": (["bad-average"], "app"),
    "bad-depth": (["bad-depth"], "app"),
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module", params=["httptools", "h11"])
def edge(request, tmp_path_factory, whoami):
    dyn = {
        "http": {
            "routers": {
                name: {"rule": f"Host(`{name}.test`)", "service": service, "middlewares": mws}
                for name, (mws, service) in ROUTERS.items()
            },
            # "down": a port nothing listens on (taken, then freed): every dial is refused.
            "services": {"app": lb(whoami.url), "down": lb(f"http://127.0.0.1:{free_port()}")},
            "middlewares": MIDDLEWARES,
        }
    }
    eps = {"web": {"address": "127.0.0.1:0", "forwardedHeaders": {"trustedIPs": ["127.0.0.1"]}}}
    e = Edge(tmp_path_factory.mktemp(request.param), dyn, parser=request.param, entrypoints=eps)
    yield e
    e.stop()


def curl(
    edge: Edge, host: str, *args: str, path: str = "/", source: str = "127.0.0.1"
) -> tuple[int, dict[str, str], bytes]:
    """(status, headers with lower-case names, body) of curl from ``source``."""
    out = subprocess.run(
        [
            need("curl"), "-s", "-i", "--max-time", "10", "--interface", source,
            "-H", f"Host: {host}", *args, f"http://127.0.0.1:{edge.port}{path}",
        ],
        capture_output=True,
        timeout=20,
        check=True,
    )  # fmt: skip
    head, _, body = out.stdout.partition(b"\r\n\r\n")
    status_line, *lines = head.decode("latin-1").split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines)}
    return int(status_line.split()[1]), headers, body


def xff(value: str) -> tuple[str, str]:
    return ("-H", f"X-Forwarded-For: {value}")


# -- ipAllowList, ipWhiteList ---------------------------------------------------------------


def test_ip_allow_list_by_peer_address(edge):
    assert curl(edge, "allow.test")[0] == 200
    assert curl(edge, "allow.test", source="127.0.0.2")[0] == 200
    status, headers, body = curl(edge, "allow.test", source="127.0.0.3")
    assert (status, body) == (403, b"Forbidden")
    assert headers["content-type"] == "text/plain; charset=utf-8"
    # A client not trusted cannot choose its address with X-Forwarded-For.
    assert curl(edge, "allow.test", *xff("127.0.0.1"), source="127.0.0.3")[0] == 403


def test_ip_allow_list_by_depth_from_a_trusted_proxy(edge):
    """depth 2: the second entry from the right of X-Forwarded-For (edge reads it as
    Traefik's middlewares do, before it appends the peer)."""
    assert curl(edge, "depth.test", *xff("10.0.0.1, 10.9.9.9"))[0] == 200
    assert curl(edge, "depth.test", *xff("2001:db8::7, 10.9.9.9"))[0] == 200
    status, _, body = curl(edge, "depth.test", *xff("10.0.0.2, 10.9.9.9"))
    assert (status, body) == (404, b"Not Found")  # rejectStatusCode
    assert curl(edge, "depth.test", *xff("10.0.0.1"))[0] == 404  # no second entry
    # From an untrusted peer the header is not read: nothing at depth 2.
    assert curl(edge, "depth.test", *xff("10.0.0.1, 10.9.9.9"), source="127.0.0.2")[0] == 404


def test_ip_allow_list_excluding_proxies(edge):
    assert curl(edge, "excluded.test", *xff("192.0.2.1, 10.1.1.1, 10.2.2.2"))[0] == 200
    assert curl(edge, "excluded.test", *xff("192.0.2.2, 10.1.1.1"))[0] == 403
    assert curl(edge, "excluded.test", *xff("10.1.1.1"))[0] == 403  # all excluded: none


def test_ip_white_list_the_deprecated_name(edge):
    assert curl(edge, "white.test", source="127.0.0.2")[0] == 200
    assert curl(edge, "white.test", source="127.0.0.3")[:3:2] == (403, b"Forbidden")


# -- rateLimit ----------------------------------------------------------------------


def test_rate_limit_per_client_address(edge):
    """1 a minute, burst 2: two pass, the third waits ~60 s for its token: 429 with
    Retry-After in whole seconds and X-Retry-In as Go writes a duration; another
    address has a bucket of its own."""
    source = "127.0.0.4"  # each codec runs its own edge: buckets of its own
    assert curl(edge, "limit.test", source=source)[0] == 200
    assert curl(edge, "limit.test", source=source)[0] == 200
    status, headers, body = curl(edge, "limit.test", source=source)
    assert (status, body) == (429, b"Too Many Requests")
    assert 58 <= int(headers["retry-after"]) <= 60
    assert headers["x-retry-in"].endswith("s") and headers["x-retry-in"][0].isdigit()
    assert curl(edge, "limit.test", source="127.0.0.5")[0] == 200


def test_rate_limit_budget_is_each_routers_own(edge):
    """Two routers naming one rateLimit: as Traefik builds a middleware per router,
    each has its own buckets; one spent leaves the other's whole."""
    source = "127.0.0.6"
    assert [curl(edge, "limit.test", source=source)[0] for _ in range(3)] == [200, 200, 429]
    assert [curl(edge, "limit-twin.test", source=source)[0] for _ in range(3)] == [200, 200, 429]


def test_rate_limit_by_request_header(edge):
    a, b = "alice", "bob"
    assert curl(edge, "user.test", "-H", f"X-User: {a}")[0] == 200
    assert curl(edge, "user.test", "-H", f"X-User: {a}")[0] == 429
    assert curl(edge, "user.test", "-H", f"X-User: {b}")[0] == 200


def test_rate_limit_by_forwarded_address(edge):
    ip = "198.51.100.1"
    assert curl(edge, "xff.test", *xff(ip))[0] == 200
    assert curl(edge, "xff.test", *xff(ip))[0] == 429
    assert curl(edge, "xff.test", *xff("203.0.113.9, " + ip))[0] == 429  # depth 1: the last
    assert curl(edge, "xff.test", *xff(ip + ", 203.0.113.9"))[0] == 200


# -- inFlightReq --------------------------------------------------------------------


def slow_request(edge: Edge, host: str, seconds: float) -> socket.socket:
    """A connection whose request is in flight for ``seconds`` (whoami's delay)."""
    s = socket.create_connection(("127.0.0.1", edge.port), timeout=10)
    s.sendall(f"GET /data?size=5&delay={seconds} HTTP/1.1\r\nHost: {host}\r\n\r\n".encode())
    return s


def wait_status(edge: Edge, host: str, want: int, timeout: float = 10.0) -> int:
    deadline = time.monotonic() + timeout
    status = 0
    while time.monotonic() < deadline:
        status = curl(edge, host)[0]
        if status == want:
            return status
        time.sleep(0.05)
    return status


def test_in_flight_req_refuses_beyond_amount_until_the_first_ends(edge):
    s = slow_request(edge, "one.test", 2)
    try:
        assert wait_status(edge, "one.test", 429, timeout=5) == 429
        status, _, body = curl(edge, "one.test")
        assert (status, body) == (429, b"max connections reached: 1")
        s.settimeout(10)
        answer = b""
        while b"\r\n\r\n" not in answer or not answer.endswith(b"xxxxx"):
            chunk = s.recv(4096)
            if not chunk:
                break
            answer += chunk
            if len(answer) > 1000:
                break
        assert answer.startswith(b"HTTP/1.1 200")
    finally:
        s.close()
    assert wait_status(edge, "one.test", 200, timeout=5) == 200


def test_in_flight_req_counts_are_each_routers_own(edge):
    """Two routers naming one inFlightReq (amount 1, by client address: the routers'
    hosts would part the counts anyway): a request in flight through one leaves the
    other's slot free."""
    s = slow_request(edge, "slot-twin.test", 2)
    try:
        assert wait_status(edge, "slot-twin.test", 429, timeout=5) == 429
        assert curl(edge, "slot.test")[0] == 200
    finally:
        s.close()


def test_in_flight_req_slot_comes_back_when_the_client_aborts(edge):
    """A client resetting its connection mid-exchange frees its slot at once, not when
    the upstream would have answered (30 s later)."""
    s = slow_request(edge, "one-abort.test", 30)
    try:
        assert wait_status(edge, "one-abort.test", 429, timeout=5) == 429
    finally:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        s.close()  # a reset
    started = time.monotonic()
    assert wait_status(edge, "one-abort.test", 200, timeout=10) == 200
    assert time.monotonic() - started < 5


def test_in_flight_req_slot_comes_back_after_an_upstream_failure(edge):
    for _ in range(3):  # amount 1: each would be refused if the one before kept its slot
        assert curl(edge, "one-down.test")[0] == 502


# -- bad values ---------------------------------------------------------------------


def test_a_bad_value_disables_that_middleware_naming_the_key(edge):
    for host, key in (
        ("bad-range.test", "ipAllowList.sourceRange[0]: invalid IP or CIDR '10.0.0.300'"),
        ("bad-average.test", "rateLimit.average: -5 is negative"),
        ("bad-depth.test", "inFlightReq.sourceCriterion.ipStrategy.depth: -1 is negative"),
    ):
        assert curl(edge, host)[0] == 404, host  # its router is disabled
        assert key in edge.log, key
    assert curl(edge, "allow.test")[0] == 200  # the rest serves
