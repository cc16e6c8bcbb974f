"""Traefik's rule semantics through a real entrypoint: the table of
``tests/unit/rules/test_rule.py``, each case a router, each request raw bytes on a
socket to ``edge run``, under both HTTP codecs; and ``edge check`` on rule syntax.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import yaml

from tests.harness import Edge, lb, raw
from tests.unit.rules.test_rule import CASES, Case

SERVED = [c for c in CASES if c.entrypoint]


def case_rule(i: int, case: Case) -> str:
    """The case's rule, narrowed to requests carrying its number (so cases never overlap)."""
    marker = "Header" if case.syntax == "v3" else "Headers"
    return f"({case.rule}) && {marker}(`X-Case`, `{i}`)"


def request(i: int, case: Case) -> bytes:
    req = case.req
    lines = [f"{req.method} {req.target} HTTP/1.1", f"Host: {req.host}", f"X-Case: {i}"]
    lines += [f"{name}: {value}" for name, value in req.headers]
    lines += ["Content-Length: 0", "Connection: close", "", ""]
    return "\r\n".join(lines).encode("utf-8")


@pytest.fixture(scope="module", params=["httptools", "h11"])
def edge(request, tmp_path_factory, whoami):
    """One edge per codec, with a router per served case, for the two tests that
    only send it requests."""
    routers = {}
    for i, case in enumerate(SERVED):
        routers[f"case{i}"] = {
            "rule": case_rule(i, case),
            "service": "w",
            "ruleSyntax": case.syntax,
        }
    routers["forwarded"] = {"rule": "Path(`/keep%2FAsAs`)", "service": "w"}
    e = Edge(
        tmp_path_factory.mktemp(f"rules-{request.param}"),
        {"http": {"routers": routers, "services": {"w": lb(whoami.url)}}},
        parser=request.param,
    )
    yield e
    e.stop()


def test_every_case_gets_traefiks_answer_through_an_entrypoint(edge):
    wrong = []
    for i, case in enumerate(SERVED):
        answer = raw(edge.port, request(i, case))
        status = int(answer.split(b" ", 2)[1]) if answer.startswith(b"HTTP/1.1 ") else 0
        if status != (200 if case.match else 404):
            wrong.append((case.bullet, case.syntax, case.rule, case.req, status, case.source))
    assert wrong == [], "\n".join(map(repr, wrong))
    assert "disabled" not in edge.log, edge.log  # every case's router was valid


def test_the_path_goes_upstream_as_the_client_wrote_it(edge):
    # Routed on its routing path (/keep%2FAsAs), forwarded byte for byte.
    answer = raw(
        edge.port, b"GET /keep%2fAs%41s?x=%2F HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n"
    )
    assert answer.startswith(b"HTTP/1.1 200"), answer
    seen = json.loads(answer.split(b"\r\n\r\n", 1)[1])
    assert (seen["path"], seen["query"]) == ("/keep%2fAs%41s", "x=%2F")


def edge_check(tmp_path, static: dict, dynamic: dict) -> subprocess.CompletedProcess[str]:
    (tmp_path / "dynamic.yaml").write_text(yaml.safe_dump(dynamic))
    static = {
        "entryPoints": {"web": {"address": ":80"}},
        "providers": {"file": {"filename": "dynamic.yaml"}},
        **static,
    }
    (tmp_path / "edge.yaml").write_text(yaml.safe_dump(static))
    return subprocess.run(
        [sys.executable, "-m", "edge", "check", "--config", str(tmp_path / "edge.yaml")],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip


def test_check_says_which_syntax_each_router_uses(tmp_path):
    dynamic = {
        "http": {
            "routers": {
                "modern": {"rule": "Host(`a.com`)", "service": "s"},
                "legacy": {"rule": "Host(`a.com`, `b.com`)", "service": "s", "ruleSyntax": "v2"},
                "mixed": {"rule": "Headers(`X`, `1`)", "service": "s"},
            },
            "services": {"s": lb("http://127.0.0.1:1")},
        }
    }
    out = edge_check(tmp_path, {}, dynamic)
    lines = out.stdout.splitlines()
    assert "rule syntax: v3 unless a router says otherwise (core.defaultRuleSyntax)" in lines
    assert "router modern@file: enabled" in lines
    assert "router legacy@file (rule syntax v2): enabled" in lines
    mixed = next(line for line in lines if line.startswith("router mixed@file: disabled"))
    assert "'Headers' is v2 syntax" in mixed
    assert out.returncode == 1

    dynamic["http"]["routers"].pop("mixed")
    dynamic["http"]["routers"]["modern"]["ruleSyntax"] = "v3"
    out = edge_check(tmp_path, {"core": {"defaultRuleSyntax": "v2"}}, dynamic)
    lines = out.stdout.splitlines()
    assert "rule syntax: v2 unless a router says otherwise (core.defaultRuleSyntax)" in lines
    assert "router modern@file (rule syntax v3): enabled" in lines
    assert "router legacy@file: enabled" in lines
    assert out.returncode == 0, out.stdout


def test_host_wildcard_does_not_take_an_empty_label(tmp_path, parser, whoami):
    dynamic = {
        "http": {
            "routers": {"wild": {"rule": "Host(`*.example.com`)", "service": "who"}},
            "services": {"who": lb(whoami.url)},
        }
    }
    e = Edge(tmp_path, dynamic, parser=parser)
    try:
        for host, status in (
            (b"a.example.com", 200),
            (b".example.com", 404),
            (b"A.Example.COM.", 200),
        ):
            for _ in range(2):  # the second from the entrypoint's remembered Host
                resp = raw(
                    e.port, b"GET / HTTP/1.1\r\nHost: " + host + b"\r\nConnection: close\r\n\r\n"
                )
                assert resp.startswith(b"HTTP/1.1 %d " % status), (host, resp[:200])
    finally:
        e.stop()
