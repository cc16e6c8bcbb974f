"""Prometheus metrics (edge.entrypoints.metrics): the hot path's counting, the sums
over label sets and processes, and the text exposition format 0.0.4."""

from __future__ import annotations

import math
from types import SimpleNamespace

import msgspec
import pytest

from edge.config.static import Prometheus
from edge.entrypoints.metrics import (
    DEFAULT_BUCKETS,
    FAMILIES,
    Registry,
    Samples,
    escape_label,
    render,
)

EP_TOTAL = "traefik_entrypoint_requests_total"
EP_DURATION = "traefik_entrypoint_request_duration_seconds"


class route:  # what the recorder reads of a Route: hashed by identity
    def __init__(self, name: str, service: str) -> None:
        self.name = name
        self.service = SimpleNamespace(name=service)


def exchange(
    route=None, status=200, method=b"GET", length=None, sent=0, served=True, retried=False
):
    """What the recorder reads of an :class:`~edge.http.server.exchange.Exchange`."""
    return SimpleNamespace(
        route=route,
        status=status,
        head=SimpleNamespace(method=method, content_length=length),
        backend=object() if served and route is not None else None,
        sent=sent,
        retried=retried,
    )


def registry(**options) -> Registry:
    return Registry(Prometheus(**options))


# -- counting -----------------------------------------------------------------------------


def test_each_label_set_counts_its_exchanges():
    reg = registry(add_routers_labels=True)
    rec = reg.hook("web", None)
    a = route("a@file", "s@file")
    for _ in range(3):
        rec(exchange(a, 200, sent=10), 0.01)
    rec(exchange(a, 500, method=b"POST", length=7, sent=4), 0.02)
    rec(exchange(None, 404, sent=19), 0.001)
    s = reg.collect()
    ep = {"protocol": "http", "entrypoint": "web"}
    assert s.get(EP_TOTAL, code="200", method="GET", **ep) == 3
    assert s.get(EP_TOTAL, code="500", method="POST", **ep) == 1
    assert s.get(EP_TOTAL, code="404", method="GET", **ep) == 1
    assert s.get("traefik_entrypoint_responses_bytes_total", code="200", method="GET", **ep) == 30
    assert s.get("traefik_entrypoint_requests_bytes_total", code="500", method="POST", **ep) == 7
    assert (
        s.get(
            "traefik_router_requests_total",
            code="200",
            method="GET",
            protocol="http",
            router="a@file",
            service="s@file",
        )
        == 3
    )
    assert (
        s.get(
            "traefik_service_requests_total",
            code="500",
            method="POST",
            protocol="http",
            service="s@file",
        )
        == 1
    )
    # No router matched the 404: no router or service series for it.
    assert all(labels[0] != "404" for labels in s.values["traefik_router_requests_total"])
    assert all(labels[0] != "404" for labels in s.values["traefik_service_requests_total"])


def test_counters_keep_growing_across_scrapes():
    reg = registry()
    rec = reg.hook("web", None)
    a = route("a@file", "s@file")
    rec(exchange(a), 0.01)
    first = reg.collect().get(EP_TOTAL, code="200", method="GET", protocol="http", entrypoint="web")
    rec(exchange(a), 0.01)
    rec(exchange(a), 0.01)
    again = reg.collect().get(EP_TOTAL, code="200", method="GET", protocol="http", entrypoint="web")
    assert (first, again) == (1, 3)
    # Each scrape folds the cells: none of the counted routes is held after it.
    assert reg.recorders["web"].cells == {}


def test_a_new_configuration_s_route_adds_to_the_same_series():
    reg = registry(add_routers_labels=True)
    rec = reg.hook("web", None)
    rec(exchange(route("a@file", "s@file")), 0.01)
    rec(exchange(route("a@file", "s@file")), 0.01)  # an equal route of a later snapshot
    labels = {
        "code": "200",
        "method": "GET",
        "protocol": "http",
        "router": "a@file",
        "service": "s@file",
    }
    assert reg.collect().get("traefik_router_requests_total", **labels) == 2


def test_an_answer_before_any_server_is_the_router_s_not_the_service_s():
    reg = registry(add_routers_labels=True)
    rec = reg.hook("web", None)
    rec(exchange(route("a@file", "s@file"), 401, served=False), 0.01)
    s = reg.collect()
    assert (
        s.get(
            "traefik_router_requests_total",
            code="401",
            method="GET",
            protocol="http",
            router="a@file",
            service="s@file",
        )
        == 1
    )
    assert "traefik_service_requests_total" not in s.values


def test_unknown_methods_share_one_cell():
    reg = registry()
    rec = reg.hook("web", None)
    a = route("a@file", "s@file")
    for i in range(50):
        rec(exchange(a, method=b"X%d" % i), 0.01)
    assert len(reg.recorders["web"].cells) == 1
    s = reg.collect()
    assert (
        s.get(EP_TOTAL, code="200", method="EXTENSION_METHOD", protocol="http", entrypoint="web")
        == 50
    )


def test_101_is_the_websocket_protocol():
    reg = registry()
    rec = reg.hook("web", None)
    rec(exchange(route("a@file", "s@file"), 101), 3.0)
    assert (
        reg.collect().get(
            EP_TOTAL, code="101", method="GET", protocol="websocket", entrypoint="web"
        )
        == 1
    )


def test_retries_are_counted_per_service():
    reg = registry()
    rec = reg.hook("web", None)
    rec(exchange(route("a@file", "s@file"), retried=True), 0.01)
    rec(exchange(route("a@file", "s@file")), 0.01)
    assert reg.collect().get("traefik_service_retries_total", service="s@file") == 1


def test_label_options_choose_the_families():
    reg = registry(add_entry_points_labels=False, add_services_labels=False)
    rec = reg.hook("web", None)
    rec(exchange(route("a@file", "s@file")), 0.01)
    names = set(reg.collect().values)
    assert not any(
        n.startswith(("traefik_entrypoint_", "traefik_router_", "traefik_service_")) for n in names
    )


def test_the_access_log_still_gets_every_exchange():
    seen = []
    reg = registry()
    rec = reg.hook("web", lambda ex, duration: seen.append((ex.status, duration)))
    rec(exchange(route("a@file", "s@file"), 204), 0.5)
    assert seen == [(204, 0.5)]


def test_a_duration_on_a_bound_falls_in_that_bucket():
    reg = registry(buckets=[0.1, 1.0])
    rec = reg.hook("web", None)
    a = route("a@file", "s@file")
    for d in (0.05, 0.1, 0.5, 1.0, 2.0):
        rec(exchange(a), d)
    buckets = reg.collect().get(
        EP_DURATION, code="200", method="GET", protocol="http", entrypoint="web"
    )
    assert buckets[:-1] == [2, 2, 1]  # <= 0.1, <= 1.0, above
    assert buckets[-1] == pytest.approx(3.65)


def test_default_buckets_are_traefik_s():
    assert tuple(Prometheus().buckets) == DEFAULT_BUCKETS == (0.1, 0.3, 1.2, 5.0)


def test_buckets_must_be_finite():
    with pytest.raises(msgspec.ValidationError, match="buckets"):
        msgspec.convert({"buckets": [1, math.inf]}, Prometheus)


# -- several processes --------------------------------------------------------------------


def test_workers_samples_add_up_and_gauges_keep_their_rule():
    one, two = Samples(), Samples()
    for s, n, up, start in ((one, 3, 1, 100.0), (two, 4, 0, 90.0)):
        s.add(EP_TOTAL, ("200", "GET", "http", "web"), n)
        s.observe(EP_DURATION, ("200", "GET", "http", "web"), [n, 0, 0, 0, 0, 0.1 * n])
        s.add("traefik_service_server_up", ("s@file", "http://x"), up)
        s.add("process_start_time_seconds", (), start)
    both = Samples()
    both.merge(one)
    both.merge(two)
    assert both.get(EP_TOTAL, code="200", method="GET", protocol="http", entrypoint="web") == 7
    assert both.get(EP_DURATION, code="200", method="GET", protocol="http", entrypoint="web")[
        :5
    ] == [7, 0, 0, 0, 0]
    assert both.get("traefik_service_server_up", service="s@file", url="http://x") == 1
    assert both.get("process_start_time_seconds") == 90.0


def test_samples_cross_a_msgpack_channel_unchanged():
    reg = registry()
    rec = reg.hook("web", None)
    rec(exchange(route("a@file", "s@file")), 0.2)
    sent = reg.collect()
    rows = msgspec.msgpack.decode(msgspec.msgpack.encode(sent.rows()))
    back = Samples.from_rows(sent.bounds, rows)
    assert render(back) == render(sent)


# -- the text format ----------------------------------------------------------------------


def test_label_values_are_escaped():
    assert escape_label('a\\b"c\nd') == 'a\\\\b\\"c\\nd'
    s = Samples()
    s.add("traefik_service_server_up", ('we"ird\\', "http://x\n"), 1)
    assert (
        'traefik_service_server_up{service="we\\"ird\\\\",url="http://x\\n"} 1'
        in render(s).decode()
    )


def test_histogram_lines_are_cumulative_and_end_with_inf_sum_count():
    s = Samples((0.1, 0.3))
    s.observe(EP_DURATION, ("200", "GET", "http", "web"), [2, 0, 3, 7.25])
    text = render(s).decode().splitlines()
    labels = 'code="200",method="GET",protocol="http",entrypoint="web"'
    assert text == [
        f"# HELP {EP_DURATION} {FAMILIES[EP_DURATION].help}",
        f"# TYPE {EP_DURATION} histogram",
        f'{EP_DURATION}_bucket{{{labels},le="0.1"}} 2',
        f'{EP_DURATION}_bucket{{{labels},le="0.3"}} 2',
        f'{EP_DURATION}_bucket{{{labels},le="+Inf"}} 5',
        f"{EP_DURATION}_sum{{{labels}}} 7.25",
        f"{EP_DURATION}_count{{{labels}}} 5",
    ]


def test_every_family_present_has_help_and_type_and_no_labels_means_no_braces():
    s = Samples()
    s.add("traefik_config_reloads_total", (), 3)
    s.add("traefik_config_last_reload_success", (), 1.5e9 + 0.5)
    assert render(s) == (
        b"# HELP traefik_config_reloads_total Config reloads\n"
        b"# TYPE traefik_config_reloads_total counter\n"
        b"traefik_config_reloads_total 3\n"
        b"# HELP traefik_config_last_reload_success Last config reload success\n"
        b"# TYPE traefik_config_last_reload_success gauge\n"
        b"traefik_config_last_reload_success 1500000000.5\n"
    )


def test_special_values():
    s = Samples()
    s.add("process_max_fds", (), math.inf)
    assert b"process_max_fds +Inf\n" in render(s)


def test_process_families_are_read():
    s = registry().collect()
    assert s.get("process_cpu_seconds_total") > 0
    assert s.get("process_resident_memory_bytes") > 1e6
    assert s.get("process_open_fds") >= 3
    assert 1e9 < s.get("process_start_time_seconds") < 1e10


def test_samples_cross_the_worker_channel_as_a_metrics_frame():
    from edge.ipc import FrameDecoder, Metrics, ToSupervisor, encode

    s = Samples()
    s.add(EP_TOTAL, ("200", "GET", "http", "web"), 3)
    s.observe(EP_DURATION, ("200", "GET", "http", "web"), [1, 1, 0, 0, 1, 6.5])
    frame = encode(Metrics(s.rows()))  # type: ignore[arg-type]
    (msg,) = FrameDecoder(ToSupervisor).feed(frame)
    assert render(Samples.from_rows(s.bounds, msg.rows)) == render(s)


def test_an_ended_worker_leaves_its_counters_not_its_gauges():
    s = Samples()
    s.add(EP_TOTAL, ("200", "GET", "http", "web"), 3)
    s.add("traefik_open_connections", ("web", "TCP"), 5)
    kept = s.counters()
    assert kept.get(EP_TOTAL, code="200", method="GET", protocol="http", entrypoint="web") == 3
    assert "traefik_open_connections" not in kept.values
