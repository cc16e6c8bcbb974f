"""HTTP services as the routers hold them (edge.router.http): a load balancer skips the
servers its health set holds, a failover picks its main service while that has a
server up, a weighted service skips a child with none."""

from __future__ import annotations

import asyncio
import hashlib
from collections import Counter

import pytest

from edge.config.dynamic import Cookie
from edge.router.http import (
    Backend,
    Failover,
    LoadBalancer,
    Route,
    StatusService,
    Weighted,
    cookie_value,
    sticky_cookie_name,
    sticky_value,
)
from edge.transports import ServerURL, TransportRegistry

URLS = [f"http://10.0.0.{i}:80" for i in range(1, 4)]


def balancer(
    name: str,
    urls: list[str],
    down: set[str] | None,
    weights: list[int] | None = None,
    sticky: Cookie | None = None,
) -> LoadBalancer:
    loop = asyncio.new_event_loop()
    try:
        transport = TransportRegistry(loop).get("default@internal")
    finally:
        loop.close()
    backends = [
        (Backend(name, ServerURL(u), transport, True), w)
        for u, w in zip(urls, weights or [1] * len(urls), strict=True)
    ]
    return LoadBalancer(name, backends, True, True, down=down, sticky=sticky)


def urls(service, n: int) -> Counter[str | None]:
    return Counter(b.server.url if b else None for b in (service.pick() for _ in range(n)))


def test_a_load_balancer_skips_the_servers_down():
    down: set[str] = set()
    lb = balancer("app", URLS, down, [3, 2, 1])
    assert urls(lb, 60) == {URLS[0]: 30, URLS[1]: 20, URLS[2]: 10}
    down.add(URLS[0])  # as a check does: in place, read at the next pick
    assert urls(lb, 60) == {URLS[1]: 40, URLS[2]: 20}
    down.update(URLS)
    assert urls(lb, 5) == {None: 5}  # no server up: the service answers 503
    down.clear()
    assert set(urls(lb, 6)) == set(URLS)


def test_one_server_with_health_is_never_picked_without_looking():
    """``single`` lets the exchange skip ``pick()``: never with a health set to read."""
    down: set[str] = set()
    lb = balancer("app", URLS[:1], down)
    assert lb.single is None
    down.add(URLS[0])
    assert lb.pick() is None
    assert balancer("app", URLS[:1], None).single is not None


def test_an_update_in_place_keeps_reading_the_same_health():
    down = {URLS[1]}
    lb = balancer("app", URLS[:2], down)
    fresh = balancer("app", URLS, None)
    lb.update([(b, 1) for b in fresh.backends])
    assert [b.server.url for b in lb.backends] == URLS
    assert urls(lb, 10) == {URLS[0]: 5, URLS[2]: 5}


def test_failover_takes_the_fallback_while_the_main_service_has_no_server_up():
    main_down: set[str] = set()
    main = balancer("main", URLS[:2], main_down)
    spare = balancer("spare", URLS[2:], set())
    failover = Failover("fo", main, spare)
    assert set(urls(failover, 4)) == set(URLS[:2])
    main_down.add(URLS[0])
    assert urls(failover, 4) == {URLS[1]: 4}  # one main server up: still the main
    main_down.add(URLS[1])
    assert urls(failover, 4) == {URLS[2]: 4}
    main_down.clear()
    assert set(urls(failover, 4)) == set(URLS[:2])


def test_a_failover_with_nothing_up_is_skipped_by_its_parent():
    main = balancer("main", URLS[:1], {URLS[0]})
    spare = balancer("spare", URLS[1:2], {URLS[1]})
    other = balancer("other", URLS[2:], None)
    weighted = Weighted("w", [(Failover("fo", main, spare), 1), (other, 1)])
    assert urls(weighted, 6) == {URLS[2]: 6}


def test_a_failover_missing_a_child_serves_with_the_other():
    spare = balancer("spare", URLS[2:], None)
    assert urls(Failover("fo", None, spare), 2) == {URLS[2]: 2}
    assert urls(Failover("fo", None, None), 2) == {None: 2}


def test_a_weighted_child_with_no_server_up_is_skipped():
    down: set[str] = set()
    one = balancer("one", URLS[:1], down)
    two = balancer("two", URLS[1:2], None)
    weighted = Weighted("w", [(one, 1), (two, 1)])
    assert urls(weighted, 4) == {URLS[0]: 2, URLS[1]: 2}
    down.add(URLS[0])
    assert urls(weighted, 4) == {URLS[1]: 4}


def test_a_weighted_status_member_answers_its_share_and_no_route_through_it_is_express():
    """A member with a status (a Gateway backendRef that cannot be served) is picked
    with its weight, never skipped, and picks an answer, not a server; the others
    keep their shares."""
    down: set[str] = set()
    one = balancer("one", URLS[:1], down)
    weighted = Weighted("w", [(one, 3), (StatusService("gone", 500), 1)])
    picked = [weighted.pick() for _ in range(40)]
    assert Counter(b.status if b is not None else None for b in picked) == {0: 30, 500: 10}
    assert {b.service for b in picked if b is not None and b.status} == {"gone"}
    assert not Route("r", weighted).express
    even = Weighted("w", [(one, 1), (StatusService("gone", 500), 1)])
    down.add(URLS[0])  # no server up: the answer's share is all that is left
    assert [b.status if b is not None else None for b in (even.pick() for _ in range(4))] == [
        500
    ] * 4
    sticky = even.pick_sticky([], [])
    assert sticky is not None and sticky.status == 500
    assert Route("r", one).express


# -- sticky cookies -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "service", "expected"),
    [  # Traefik's pkg/server/cookie table
        ("", "/my/BACKEND-v1.0~rc1", "_5f7bc"),
        ("/my/BACKEND-v1.0~rc1", "", "_my_BACKEND-v1.0~rc1"),
        ("cookie", "backend", "cookie"),
        ("", "backend", "_76eb3"),
        ("!#$%&'()*+-./:<=>?@[]^_`{|}~", "", "!#$%&'__*+-._________^_`_|_~"),
    ],
)
def test_the_cookie_name_is_traefiks(name, service, expected):
    assert sticky_cookie_name(name, service) == expected


def test_the_cookie_value_is_the_sha256_prefix_of_the_server_url():
    assert sticky_value(URLS[0]) == hashlib.sha256(URLS[0].encode()).hexdigest()[:16].encode()


@pytest.mark.parametrize(
    ("header", "value"),
    [
        (b"s=abc", b"abc"),
        (b"a=1; s=abc; s=def", b"abc"),
        (b'a=1;s="abc"', b"abc"),
        (b"ss=1; s_=2", None),
        (b"s", None),
        (b"", None),
    ],
)
def test_cookie_value_reads_one_cookie_of_a_header(header, value):
    assert cookie_value(header, b"s") == value


def sticky_lb(down: set[str] | None = None, **cookie) -> LoadBalancer:
    return balancer("app@file", URLS, down, sticky=Cookie(name="s", **cookie))


def test_a_sticky_balancer_sets_the_cookie_of_the_server_it_picks():
    lb = sticky_lb()
    out: list[bytes] = []
    backend = lb.pick_sticky([], out)
    assert backend is not None
    assert out == [b"Set-Cookie: s=" + sticky_value(backend.server.url) + b"; Path=/\r\n"]


def test_a_valid_cookie_keeps_its_server_and_sets_nothing():
    lb = sticky_lb()
    cookie = b"x=1; s=" + sticky_value(URLS[1])
    for _ in range(6):
        out: list[bytes] = []
        backend = lb.pick_sticky([cookie], out)
        assert backend is not None and backend.server.url == URLS[1]
        assert out == []


@pytest.mark.parametrize("old", ["raw", "fnv", "fnv of fnv"])
def test_a_cookie_of_an_older_traefik_sticks_and_is_rewritten(old):
    """Traefik still reads the raw URL and its (double) FNV-1 64 hash, and rewrites them."""
    fnv = {"raw": URLS[2], "fnv": "", "fnv of fnv": ""}[old]
    if old != "raw":
        from edge.router.http import _fnv1_64

        fnv = _fnv1_64(URLS[2])
        if old == "fnv of fnv":
            fnv = _fnv1_64(fnv)
    lb = sticky_lb()
    out: list[bytes] = []
    backend = lb.pick_sticky([b"s=" + fnv.encode()], out)
    assert backend is not None and backend.server.url == URLS[2]
    assert out == [b"Set-Cookie: s=" + sticky_value(URLS[2]) + b"; Path=/\r\n"]


def test_fnv1_64_is_gos_fnv_new64():
    from edge.router.http import _fnv1_64

    assert _fnv1_64("a") == "af63bd4c8601b7be"  # FNV-1 (not 1a), the published vector
    assert _fnv1_64("") == "cbf29ce484222325"


def test_a_cookie_naming_a_server_down_or_gone_repicks():
    down: set[str] = set()
    lb = sticky_lb(down)
    cookie = b"s=" + sticky_value(URLS[0])
    down.add(URLS[0])
    out: list[bytes] = []
    backend = lb.pick_sticky([cookie], out)
    assert backend is not None and backend.server.url != URLS[0]
    assert out == [b"Set-Cookie: s=" + sticky_value(backend.server.url) + b"; Path=/\r\n"]
    down.clear()
    lb.update([(b, 1) for b in balancer("app@file", URLS[1:], None).backends])  # URLS[0] gone
    out = []
    backend = lb.pick_sticky([cookie], out)
    assert backend is not None and backend.server.url != URLS[0]
    assert len(out) == 1
    out = []  # unknown value
    assert lb.pick_sticky([b"s=nope"], out) is not None and len(out) == 1


def test_a_server_of_weight_zero_is_not_in_the_rotation_for_its_cookie():
    lb = balancer("app@file", URLS[:2], None, [1, 0], sticky=Cookie(name="s"))
    out: list[bytes] = []
    backend = lb.pick_sticky([b"s=" + sticky_value(URLS[1])], out)
    assert backend is not None and backend.server.url == URLS[0]


def test_the_set_cookie_attributes_are_written_as_go_writes_them():
    lb = sticky_lb(
        secure=True, http_only=True, same_site="none", max_age=42, path="/foo", domain=".foo.com"
    )
    out: list[bytes] = []
    lb.pick_sticky([], out)
    _, attrs = out[0].split(b";", 1)
    assert attrs == b" Path=/foo; Domain=foo.com; Max-Age=42; HttpOnly; Secure; SameSite=None\r\n"
    out = []
    sticky_lb(max_age=-1, path="", same_site="Strict").pick_sticky([], out)
    assert out[0].split(b";", 1)[1] == b" Max-Age=0; SameSite=Strict\r\n"


def test_attribute_values_cannot_end_the_header():
    out: list[bytes] = []
    sticky_lb(path="/a\r\nX-Evil: 1;b", domain="ex\nample.com").pick_sticky([], out)
    assert out[0].split(b";", 1)[1] == b" Path=/aX-Evil: 1b; Domain=example.com\r\n"


def test_the_default_cookie_name_comes_from_the_service():
    lb = balancer("app@file", URLS, None, sticky=Cookie())
    out: list[bytes] = []
    lb.pick_sticky([], out)
    assert out[0].startswith(b"Set-Cookie: " + sticky_cookie_name("", "app@file").encode() + b"=")


def test_a_weighted_sticky_service_sticks_to_a_child_and_its_server():
    one = balancer("one@file", URLS[:2], None, sticky=Cookie(name="lb"))
    two = balancer("two@file", URLS[2:], None)
    weighted = Weighted("w@file", [(one, 1), (two, 1)], Cookie(name="w"))
    assert weighted.sticks
    out: list[bytes] = []
    backend = weighted.pick_sticky([], out)
    assert backend is not None
    first = backend.server.url
    cookies = [b"; ".join(line[len(b"Set-Cookie: ") :].split(b";")[0] for line in out)]
    seen = set()
    for _ in range(6):
        again: list[bytes] = []
        b = weighted.pick_sticky(cookies, again)
        assert again == []
        assert b is not None
        seen.add(b.server.url)
    assert seen == {first}
    names = {line.split(b"=")[0] for line in out}
    assert b"Set-Cookie: w" in names
    assert (b"Set-Cookie: lb" in names) == (first in URLS[:2])


def test_a_weighted_cookie_naming_a_child_with_no_server_up_repicks():
    down: set[str] = set()
    one = balancer("one@file", URLS[:1], down)
    two = balancer("two@file", URLS[1:2], None)
    weighted = Weighted("w@file", [(one, 1), (two, 1)], Cookie(name="w"))
    down.add(URLS[0])
    out: list[bytes] = []
    backend = weighted.pick_sticky([b"w=" + sticky_value("one")], out)
    assert backend is not None and backend.server.url == URLS[1]
    # A child of the weighted service's own provider is named as Traefik names it:
    # without the provider.
    assert out == [b"Set-Cookie: w=" + sticky_value("two") + b"; Path=/\r\n"]


def test_a_weighted_child_of_another_provider_keeps_its_qualified_name():
    one = balancer("one@docker", URLS[:1], None)
    weighted = Weighted("w@file", [(one, 1)], Cookie(name="w"))
    out: list[bytes] = []
    weighted.pick_sticky([], out)
    assert out == [b"Set-Cookie: w=" + sticky_value("one@docker") + b"; Path=/\r\n"]


def test_a_sticky_service_never_takes_the_express_path():
    assert Route("r", balancer("a", URLS, None)).express
    assert not Route("r", sticky_lb()).express
    plain = balancer("b", URLS, None)
    assert not Route("r", Weighted("w", [(sticky_lb(), 1), (plain, 1)])).express
    assert not Route("r", Failover("f", sticky_lb(), plain)).express
    assert plain.pick_sticky([b"s=x"], out := []) is not None and out == []


def test_a_weighted_heavy_child_with_no_server_up_leaves_every_request_to_the_others():
    """The rotation can land on the heavy child twice in a row: the others are still
    tried, each once, before the service picks nothing."""
    heavy = balancer("heavy", URLS[:1], {URLS[0]})
    light = balancer("light", URLS[1:2], None)
    weighted = Weighted("w", [(heavy, 3), (light, 1)])
    assert urls(weighted, 12) == {URLS[1]: 12}
    out: list[bytes] = []
    picked = [weighted.pick_sticky([], out) for _ in range(12)]
    assert {b.server.url if b else None for b in picked} == {URLS[1]}
    assert out == []
    sticky = Weighted("w", [(heavy, 3), (light, 1)], sticky=Cookie(name="lb"))
    assert sticky.sticky is not None
    light_cookie = sticky.sticky.set_cookie[sticky.sticky.index[id(light)]]
    for _ in range(12):
        out.clear()
        backend = sticky.pick_sticky([], out)
        assert backend is not None and backend.server.url == URLS[1]
        assert out == [light_cookie]  # the child that serves, never the one tried first
    none_up = Weighted("w", [(heavy, 3), (balancer("gone", URLS[1:2], {URLS[1]}), 1)])
    assert urls(none_up, 4) == {None: 4}
    out.clear()
    assert none_up.pick_sticky([], out) is None and out == []


def test_a_weighted_child_down_leaves_the_others_their_shares():
    """The rotation goes on past a child with no server up: the others share its
    turns by their weights, not the heaviest of them all."""
    heavy = balancer("heavy", URLS[:1], {URLS[0]})
    two = balancer("two", URLS[1:2], None)
    one = balancer("one", URLS[2:], None)
    weighted = Weighted("w", [(heavy, 3), (two, 2), (one, 1)])
    assert urls(weighted, 60) == {URLS[1]: 40, URLS[2]: 20}
