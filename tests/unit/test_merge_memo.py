"""merge() with a memo: a provider passing on the very routers table it passed last time
gets the routers qualified last time; anything else is merged afresh, and the result is
always the one a merge without memo gives."""

from __future__ import annotations

import msgspec

from edge.config.dynamic import (
    Configuration,
    HTTPConfiguration,
    LoadBalancer,
    Router,
    Server,
    Service,
)
from edge.config.merge import RouterMemo, merge


def conf(routers: dict[str, Router], servers: list[str]) -> Configuration:
    services = {
        "svc": Service(load_balancer=LoadBalancer(servers=[Server(url=u) for u in servers]))
    }
    return Configuration(http=HTTPConfiguration(routers=routers, services=services))


def test_the_same_routers_table_is_qualified_once_and_merges_the_same() -> None:
    routers = {"r": Router(rule="Host(`a`)", service="svc", middlewares=["m", "x@file"])}
    memo: RouterMemo = {}
    first = merge({"kubernetes": conf(routers, ["http://10.0.0.1:80"])}, memo)
    # endpoint churn: new services, the same routers table passed on
    churned = conf(routers, ["http://10.0.0.2:80"])
    second = merge({"kubernetes": churned}, memo)
    assert second == merge({"kubernetes": churned})
    assert second.http.routers["r@kubernetes"] is first.http.routers["r@kubernetes"]
    assert second.http.routers["r@kubernetes"].middlewares == ["m@kubernetes", "x@file"]
    assert (
        second.http.services["svc@kubernetes"].load_balancer.servers[0].url == "http://10.0.0.2:80"
    )


def test_another_routers_table_is_merged_afresh() -> None:
    memo: RouterMemo = {}
    old = {"r": Router(rule="Host(`a`)", service="svc")}
    merge({"kubernetes": conf(old, []), "file": conf({}, [])}, memo)
    new = dict(old, s=Router(rule="Host(`b`)", service="svc"))
    changed = merge({"kubernetes": conf(new, [])}, memo)
    assert changed == merge({"kubernetes": conf(new, [])})
    assert set(changed.http.routers) == {"r@kubernetes", "s@kubernetes"}
    assert set(memo) == {"kubernetes"}  # a provider gone is forgotten
    edited = {"r": msgspec.structs.replace(old["r"], service="other")}
    assert merge({"kubernetes": conf(edited, [])}, memo).http.routers["r@kubernetes"].service == (
        "other@kubernetes"
    )
