"""ipAllowList, ipWhiteList and the ipStrategy (edge.http.middlewares.access) on
Traefik's test tables: pkg/ip (checker_test.go, strategy_test.go) and
pkg/middlewares/ipallowlist (ip_allowlist_test.go), the same inputs and outputs;
then what Traefik's forwarded-headers handling adds (an untrusted client's
X-Forwarded-For is not read) and the configuration checks naming the key."""

from __future__ import annotations

import msgspec
import pytest

from edge.config.dynamic import IPStrategy, Middleware
from edge.http.codec import RequestHead
from edge.http.middlewares import Forward
from edge.http.middlewares.access import Checker, IPAllowList, forwarded_for, ip_strategy

IPV6_BASIC = "::abcd:ffff:c0a8:1"


def request(client_ip: str = "192.0.2.1", xff: str | None = None, trusted: bool = True) -> Forward:
    headers = [(b"Host", b"127.0.0.1")]
    if xff is not None:
        headers.append((b"X-Forwarded-For", xff.encode()))
    head = RequestHead(b"GET", b"/", b"1.1", headers, True, False, None, False, False)
    return Forward(
        "127.0.0.1",
        b"/",
        b"",
        b"GET",
        b"127.0.0.1",
        b"http",
        head if trusted else None,
        head,
        client_ip,
    )


def strategy(**config):
    return ip_strategy(msgspec.convert(config, IPStrategy) if config else None)


# -- pkg/ip/checker_test.go -----------------------------------------------------------


@pytest.mark.parametrize(
    ("allow", "remote", "authorized"),
    [
        (["1.2.3.4/24"], "10.2.3.1:123", False),  # remoteAddr not in range
        (["1.2.3.4/24"], "1.2.3.1:123", True),  # remoteAddr in range
        (["127.2.3.4/24"], "0127.2.3.1:123", False),  # octal ip in remoteAddr
    ],
)
def test_is_authorized(allow, remote, authorized):
    assert Checker(allow).authorized(remote) is authorized


@pytest.mark.parametrize(
    ("trusted", "passes", "rejects"),
    [
        (["1.2.3.4/24"], ["1.2.3.1", "1.2.3.32", "1.2.3.156", "1.2.3.255"],
         ["1.2.16.1", "1.2.32.1", "127.0.0.1", "8.8.8.8"]),
        (["8.8.8.8"], ["8.8.8.8"], ["8.8.8.7", "8.8.8.9", "8.8.8.0", "8.8.8.255", "4.4.4.4", "127.0.0.1"]),
        (["8.8.8.8/32"], ["8.8.8.8"], ["8.8.8.7", "8.8.8.9", "8.8.8.0", "8.8.8.255", "4.4.4.4", "127.0.0.1"]),
        (["1.2.3.4/24", "8.8.8.8/8"],
         ["1.2.3.1", "1.2.3.32", "1.2.3.156", "1.2.3.255", "8.8.4.4", "8.0.0.1", "8.32.42.128", "8.255.255.255"],
         ["1.2.16.1", "1.2.32.1", "127.0.0.1", "4.4.4.4", "4.8.8.8"]),
        (["2a03:4000:6:d080::/64"],
         ["2a03:4000:6:d080::", "2a03:4000:6:d080::1", "2a03:4000:6:d080:dead:beef:ffff:ffff", "2a03:4000:6:d080::42"],
         ["2a03:4000:7:d080::", "2a03:4000:7:d080::1", "fe80::", "4242::1"]),
        (["2a03:4000:6:d080::42/128"], ["2a03:4000:6:d080::42"],
         ["2a03:4000:6:d080::1", "2a03:4000:6:d080:dead:beef:ffff:ffff", "2a03:4000:6:d080::43"]),
        (["2a03:4000:6:d080::/64", "fe80::/16"],
         ["2a03:4000:6:d080::", "2a03:4000:6:d080::1", "2a03:4000:6:d080:dead:beef:ffff:ffff",
          "2a03:4000:6:d080::42", "fe80::1", "fe80:aa00:00bb:4232:ff00:eeee:00ff:1111", "fe80::fe80"],
         ["2a03:4000:7:d080::", "2a03:4000:7:d080::1", "4242::1"]),
        (["2a03:4000:6:d080::/64", "fe80::/16", "1.2.3.4/24", "8.8.8.8/8"],
         ["2a03:4000:6:d080::", "2a03:4000:6:d080::1", "2a03:4000:6:d080:dead:beef:ffff:ffff",
          "2a03:4000:6:d080::42", "fe80::1", "fe80:aa00:00bb:4232:ff00:eeee:00ff:1111",
          "fe80:aa00:00bb:4232:ff00:eeee:00ff:1111%vEthernet", "fe80::fe80", "1.2.3.1", "1.2.3.32",
          "1.2.3.156", "1.2.3.255", "8.8.4.4", "8.0.0.1", "8.32.42.128", "8.255.255.255"],
         ["2a03:4000:7:d080::", "2a03:4000:7:d080::1", "2a03:4000:7:d080::1%vmnet1", "4242::1",
          "1.2.16.1", "1.2.32.1", "127.0.0.1", "4.4.4.4", "4.8.8.8"]),
        (["127.0.0.1/32"], [], ["foo", "10.0.0.350", "fe:::80", "", "\\&$§&/("]),  # broken
    ],
)  # fmt: skip
def test_contains(trusted, passes, rejects):
    checker = Checker(trusted)
    for ip in passes:
        assert checker.contains(ip), ip
    for ip in rejects:
        assert not checker.contains(ip), ip


def test_an_ipv4_mapped_address_is_the_ipv4_address():
    assert Checker(["10.0.0.0/8"]).contains("::ffff:10.1.2.3")
    assert Checker(["::ffff:10.0.0.0/104"]).contains("10.1.2.3")


# -- pkg/ip/strategy_test.go ----------------------------------------------------------


@pytest.mark.parametrize(
    ("remote", "subnet", "expected"),
    [
        ("192.0.2.1", None, "192.0.2.1"),
        ("::abcd:ffff:c0a8:1", None, "::abcd:ffff:c0a8:1"),
        ("::abcd:ffff:c0a8:1%1", None, "::abcd:ffff:c0a8:1%1"),
        ("192.0.2.1", 24, "192.0.2.1"),  # ipv4: the subnet is ignored
        ("::abcd:ffff:c0a8:1", 80, "::abcd:0:0:0"),
        ("::abcd:ffff:c0a8:1%1", 80, "::abcd:0:0:0"),
    ],
)
def test_remote_addr_strategy(remote, subnet, expected):
    config = {} if subnet is None else {"ipv6Subnet": subnet}
    assert strategy(**config)(request(remote)) == expected


@pytest.mark.parametrize(
    ("depth", "xff", "subnet", "expected"),
    [
        (3, "10.0.0.4,10.0.0.3,10.0.0.2,10.0.0.1", None, "10.0.0.3"),
        (2, "", None, ""),  # nonexistent depth
        (2, "10.0.0.2,10.0.0.1", None, "10.0.0.2"),
        (2, "10.0.0.3,10.0.0.2,10.0.0.1", 80, "10.0.0.2"),
        (2, f"10.0.0.3,{IPV6_BASIC},10.0.0.1", 80, "::abcd:0:0:0"),
    ],
)
def test_depth_strategy(depth, xff, subnet, expected):
    config = {"depth": depth} | ({} if subnet is None else {"ipv6Subnet": subnet})
    assert strategy(**config)(request(xff=xff)) == expected


@pytest.mark.parametrize(
    ("excluded", "xff", "expected"),
    [
        (
            ["10.0.0.4", "10.0.0.3", "10.0.0.2", "10.0.0.1"],
            "10.0.0.4,10.0.0.3,10.0.0.2,10.0.0.1",
            "",
        ),
        (["10.0.0.2", "10.0.0.1"], "10.0.0.4,10.0.0.3,10.0.0.2,10.0.0.1", "10.0.0.3"),
        (["10.0.0.1/24"], "127.0.0.1,10.0.0.4,10.0.0.3,10.0.0.2,10.0.0.1", "127.0.0.1"),
        (["10.0.0.1/24"], "10.0.0.4,10.0.0.3,10.0.0.2,10.0.0.1", ""),
    ],
)
def test_pool_strategy(excluded, xff, expected):
    assert strategy(excludedIPs=excluded)(request(xff=xff)) == expected


def test_depth_wins_over_excluded_ips():
    pick = strategy(depth=1, excludedIPs=["10.0.0.1"])
    assert pick(request(xff="10.0.0.2,10.0.0.1")) == "10.0.0.1"


def test_x_forwarded_for_is_read_from_trusted_clients_only():
    """Traefik deletes an untrusted client's X-Forwarded-For before any middleware: a
    depth strategy then finds nothing, and the allow list refuses."""
    assert forwarded_for(request(xff="1.1.1.1", trusted=False)) == ""
    assert strategy(depth=1)(request(xff="1.1.1.1", trusted=False)) == ""
    allow = IPAllowList("a", ["1.1.1.1"], strategy(depth=1))
    assert allow.request(request(xff="1.1.1.1", trusted=True)) is None
    assert allow.request(request(xff="1.1.1.1", trusted=False)).status == 403


def test_header_lines_are_joined_as_go_joins_them():
    head = RequestHead(
        b"GET", b"/", b"1.1",
        [(b"X-Forwarded-For", b"1.1.1.1, 2.2.2.2"), (b"x-forwarded-for", b"3.3.3.3")],
        True, False, None, False, False,
    )  # fmt: skip
    fwd = Forward("h", b"/", b"", trusted_head=head, head=head)
    assert forwarded_for(fwd) == "1.1.1.1, 2.2.2.2, 3.3.3.3"
    assert strategy(depth=2)(fwd) == "2.2.2.2"


# -- pkg/middlewares/ipallowlist/ip_allowlist_test.go -----------------------------------


@pytest.mark.parametrize(
    ("config", "remote", "status"),
    [
        ({"sourceRange": ["20.20.20.20"]}, "20.20.20.20", None),
        ({"sourceRange": ["20.20.20.20"]}, "20.20.20.21", 403),
        ({"sourceRange": ["20.20.20.20"], "rejectStatusCode": 404}, "20.20.20.20", None),
        ({"sourceRange": ["20.20.20.20"], "rejectStatusCode": 404}, "20.20.20.21", 404),
    ],
)
def test_ip_allow_lister_serve_http(config, remote, status):
    from edge.http.middlewares.builtin import from_config

    mw = from_config("traefikTest", msgspec.convert({"ipAllowList": config}, Middleware))
    answer = mw.request(request(remote))
    assert (answer.status if answer else None) == status
    if answer is not None:
        assert answer.body == (b"Forbidden" if status == 403 else b"Not Found")


@pytest.mark.parametrize(
    ("config", "error"),
    [
        ({"ipAllowList": {"sourceRange": ["foo"]}}, "ipAllowList.sourceRange[0]: invalid IP or CIDR 'foo'"),
        ({"ipAllowList": {"sourceRange": ["10.10.10.10"]}}, None),
        ({"ipAllowList": {"sourceRange": ["10.10.10.10"], "rejectStatusCode": 600}},
         "ipAllowList.rejectStatusCode: 600 is not an HTTP status code"),
        ({"ipAllowList": {"sourceRange": []}}, "ipAllowList.sourceRange: is empty"),
        ({"ipAllowList": {"sourceRange": ["10.0.0.0/33"]}}, "ipAllowList.sourceRange[0]: invalid IP or CIDR"),
        ({"ipAllowList": {"sourceRange": ["10.0.0.0/255.0.0.0"]}}, "ipAllowList.sourceRange[0]"),
        ({"ipAllowList": {"sourceRange": ["::1", "fe80::/10"], "ipStrategy": {"depth": -1}}},
         "ipAllowList.ipStrategy.depth: -1 is negative"),
        ({"ipAllowList": {"sourceRange": ["::1"], "ipStrategy": {"ipv6Subnet": 129}}},
         "ipAllowList.ipStrategy.ipv6Subnet: 129 is not between 1 and 128"),
        ({"ipAllowList": {"sourceRange": ["::1"], "ipStrategy": {"depth": 1, "ipv6Subnet": 0}}},
         "ipAllowList.ipStrategy.ipv6Subnet: 0"),
        # Traefik reads no ipv6Subnet beside excludedIPs, and no excludedIPs beside a depth.
        ({"ipAllowList": {"sourceRange": ["::1"], "ipStrategy": {"excludedIPs": ["::2"], "ipv6Subnet": 0}}}, None),
        ({"ipAllowList": {"sourceRange": ["::1"], "ipStrategy": {"excludedIPs": ["x"]}}},
         "ipAllowList.ipStrategy.excludedIPs[0]: invalid IP or CIDR 'x'"),
        ({"ipWhiteList": {"sourceRange": ["1.2.3.4/24"]}}, None),
        ({"ipWhiteList": {"sourceRange": ["1.2.3.4/"]}}, "ipWhiteList.sourceRange[0]: invalid IP or CIDR"),
    ],
)  # fmt: skip
def test_new_ip_allow_lister(config, error):
    problems = msgspec.convert(config, Middleware).check()
    if error is None:
        assert problems == []
    else:
        assert len(problems) == 1 and problems[0].startswith(error), problems


def test_ip_white_list_refuses_with_403():
    from edge.http.middlewares.builtin import from_config

    mw = from_config(
        "w", msgspec.convert({"ipWhiteList": {"sourceRange": ["1.2.3.4/24"]}}, Middleware)
    )
    assert mw.request(request("1.2.3.200")) is None
    answer = mw.request(request("1.2.4.1"))
    assert (answer.status, answer.body) == (403, b"Forbidden")


def test_verdicts_are_bounded():
    allow = IPAllowList("a", ["10.0.0.0/8"], strategy(depth=1))
    for i in range(5000):
        allow.request(request(xff=f"11.0.{i // 256}.{i % 256}"))
    assert len(allow.verdicts) <= 4096
    assert allow.request(request(xff="10.9.9.9")) is None
