"""The checks the protocols' walks share (edge.config.runtime.checks), on elements the
loader stood in for: a serversTransport or TLS options with a key error is kept with
its reason, and disables what uses it, naming the key path; a weighted service that
did not decode shows its reason alone."""

from __future__ import annotations

from typing import Any

from edge.config.loader import decode_dynamic
from edge.config.merge import merge
from edge.config.runtime import build_runtime
from edge.errors import ConfigError
from tests.unit.config.documents import EPS, lb

BAD_TRANSPORT = "$.http.serversTransports.slow.forwardingTimeouts.dialTimeout: invalid duration"


def runtime(doc: dict[str, Any]):
    errors: list[ConfigError] = []
    conf = decode_dynamic(doc, source="d.yaml", errors=errors)
    assert errors, "the document holds a key error"
    return build_runtime(merge({"file": conf}), EPS)


def test_a_servers_transport_with_a_key_error_disables_its_services_only() -> None:
    rt = runtime(
        {
            "http": {
                "routers": {
                    "via-slow": {"rule": "Host(`a`)", "service": "slow-app"},
                    "via-fast": {"rule": "Host(`b`)", "service": "fast-app"},
                    "plain": {"rule": "Host(`c`)", "service": "app"},
                },
                "services": {
                    "slow-app": {"loadBalancer": {**lb("http://10.0.0.1")["loadBalancer"], "serversTransport": "slow"}},
                    "fast-app": {"loadBalancer": {**lb("http://10.0.0.2")["loadBalancer"], "serversTransport": "fast"}},
                    "app": lb("http://10.0.0.3"),
                },
                "serversTransports": {
                    "slow": {"forwardingTimeouts": {"dialTimeout": "soon"}},
                    "fast": {"forwardingTimeouts": {"dialTimeout": "1s"}},
                },
            }
        }
    )  # fmt: skip
    service = rt.http_services["slow-app@file"]
    assert service.status == "disabled"
    assert len(service.errors) == 1
    assert service.errors[0].startswith(
        f"serversTransport 'slow@file' is disabled: {BAD_TRANSPORT}"
    )
    router = rt.http_routers["via-slow@file"]
    assert router.status == "disabled"
    assert router.errors[0].startswith(
        "service 'slow-app@file' is disabled: serversTransport 'slow@file'"
    )
    # The transport is kept (the API shows it, its key error with it), not left out.
    assert rt.servers_transports["slow@file"].problems[0].startswith(BAD_TRANSPORT)
    for name in ("via-fast@file", "plain@file"):
        assert rt.http_routers[name].status == "enabled", rt.http_routers[name].errors


def test_tls_options_with_a_key_error_disable_the_routers_using_them() -> None:
    rt = runtime(
        {
            "http": {
                "routers": {
                    "strict": {"rule": "Host(`a`)", "service": "app", "tls": {"options": "strict"}},
                    "modern": {"rule": "Host(`b`)", "service": "app", "tls": {"options": "modern"}},
                    "default": {"rule": "Host(`c`)", "service": "app", "tls": {}},
                },
                "services": {"app": lb("http://10.0.0.1")},
            },
            "tcp": {
                "routers": {"db": {"rule": "HostSNI(`db`)", "service": "db", "tls": {"options": "strict"}}},
                "services": {"db": {"loadBalancer": {"servers": [{"address": "10.0.0.1:5432"}]}}},
            },
            "tls": {
                "options": {
                    "strict": {"minVersion": "VersionTLS13", "sniStrict": "yes"},
                    "modern": {"minVersion": "VersionTLS13"},
                }
            },
        }
    )  # fmt: skip
    reason = (
        "TLS options 'strict@file' are disabled: "
        "$.tls.options.strict.sniStrict: expected bool, got str"
    )
    for r in (rt.http_routers["strict@file"], rt.tcp_routers["db@file"]):
        assert r.status == "disabled" and r.errors == [reason]
    assert rt.http_routers["modern@file"].status == "enabled"
    assert rt.http_routers["default@file"].status == "enabled"
    assert rt.tls.options["strict@file"].problems  # kept, with its reason


def test_a_weighted_service_with_a_key_error_shows_its_reason_alone() -> None:
    rt = runtime(
        {
            "http": {
                "routers": {"r": {"rule": "Host(`a`)", "service": "split"}},
                "services": {"split": {"weighted": {"services": [{"name": "x", "wieght": 1}]}}},
            }
        }
    )
    split = rt.http_services["split@file"]
    assert split.status == "disabled"
    assert split.errors == ["$.http.services.split.weighted.services[0].wieght: unknown key"]
    assert rt.http_routers["r@file"].status == "disabled"


def test_a_weighted_member_with_a_status_is_an_answer_for_http_only() -> None:
    """An HTTP member with ``status`` names no service; a TCP or UDP one disables its
    weighted service (only HTTP answers with a status); one out of 400-599 is a key
    error naming its path."""
    rt = runtime(
        {
            "http": {
                "routers": {
                    "r": {"rule": "Host(`a`)", "service": "split"},
                    "odd": {"rule": "Host(`b`)", "service": "odd"},
                },
                "services": {
                    "app": lb("http://127.0.0.1:1"),
                    "split": {"weighted": {"services": [
                        {"name": "app", "weight": 3}, {"name": "gone", "weight": 1, "status": 500}]}},
                    "odd": {"weighted": {"services": [{"name": "ok", "status": 200}]}},
                },
            },
            "tcp": {
                "services": {
                    "db": {"loadBalancer": {"servers": [{"address": "127.0.0.1:1"}]}},
                    "split": {"weighted": {"services": [{"name": "db"}, {"name": "x", "status": 500}]}},
                }
            },
            "udp": {
                "services": {"split": {"weighted": {"services": [{"name": "x", "status": 503}]}}}
            },
        }
    )  # fmt: skip
    assert rt.http_services["split@file"].status == "enabled", rt.http_services["split@file"].errors
    assert rt.http_routers["r@file"].status == "enabled"
    assert "gone@file" not in rt.http_services
    odd = rt.http_services["odd@file"]
    assert odd.status == "disabled"
    assert odd.errors == [
        "$.http.services.odd.weighted.services[0]: status 200: an answer is an HTTP error, 400 to 599"
    ]
    only_http = "weighted.services[1].status: only HTTP members answer"
    assert rt.tcp_services["split@file"].errors == [only_http]
    assert rt.udp_services["split@file"].errors == [only_http.replace("[1]", "[0]")]


def test_highest_random_weight_members_are_judged_as_weighted_ones() -> None:
    """Its members are qualified by its provider and checked as a weighted service's:
    one missing or disabled disables it, a cycle disables every service on it."""
    conf = decode_dynamic(
        {
            "http": {
                "routers": {"r": {"rule": "Host(`a`)", "service": "hrw"}},
                "services": {
                    "app": lb("http://127.0.0.1:1"),
                    "hrw": {"highestRandomWeight": {"services": [{"name": "app", "weight": 2}]}},
                    "gone": {"highestRandomWeight": {"services": [{"name": "nowhere"}]}},
                    "loop": {"highestRandomWeight": {"services": [{"name": "loop"}]}},
                },
            }
        },
        source="d.yaml",
    )
    rt = build_runtime(merge({"file": conf}), EPS)
    hrw = rt.http_services["hrw@file"]
    assert hrw.status == "enabled", hrw.errors
    assert hrw.config.highest_random_weight.services[0].name == "app@file"
    assert rt.http_services["app@file"].used_by == ["hrw@file"]
    assert rt.http_services["gone@file"].errors == ["service 'nowhere@file' does not exist"]
    loop = rt.http_services["loop@file"]
    assert loop.status == "disabled" and "form a cycle" in loop.errors[0], loop.errors


def test_highest_random_weight_is_one_kind_of_service_among_the_others() -> None:
    errors: list[ConfigError] = []
    decode_dynamic(
        {
            "http": {
                "services": {
                    "both": {
                        "highestRandomWeight": {"services": [{"name": "a"}]},
                        "weighted": {"services": [{"name": "a"}]},
                    }
                }
            }
        },
        source="d.yaml",
        errors=errors,
    )
    assert "exactly one of" in str(errors[0]) and "highestRandomWeight" in str(errors[0])
