"""A Traefik user's configuration, as `edge check` and `edge run` take it: each option edge
lacks named as unsupported with its key path, the rest checked and, where nothing asks
for what edge lacks, served."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import yaml

from tests.harness import Edge, get, lb

TRAEFIK_STATIC = {
    "entryPoints": {"web": {"address": "127.0.0.1:0"}},
    "api": {"dashboard": True},
    "metrics": {"prometheus": {}},
    "providers": {"file": {"filename": "dynamic.yaml"}, "docker": {"exposedByDefault": False}},
}


def traefik_dynamic(backend: str) -> dict:
    return {
        "http": {
            "routers": {
                "dashboard": {
                    "rule": "Host(`admin.test`)",
                    "service": "app",
                    "middlewares": ["auth"],
                },
                "app": {"rule": "Host(`app.test`)", "service": "app", "middlewares": ["limit"]},
                "sticky": {"rule": "Host(`sticky.test`)", "service": "sticky"},
                "site": {"rule": "Host(`site.test`)", "service": "app"},
                "typo": {"rule": "Host(`typo.test`) && Pth(`/`)", "service": "app"},
            },
            "middlewares": {
                "auth": {"basicAuth": {"users": ["admin:$apr1$H6uskkkW$IgXLP6ewTrSuBkTrqE8wj/"]}},
                "limit": {"rateLimit": {"average": 100, "burst": 50}},
            },
            "services": {
                "app": lb(backend),
                "sticky": lb(
                    backend, sticky={"cookie": {"name": "lb"}}, healthCheck={"path": "/health"}
                ),
                "mirror": {
                    "mirroring": {"service": "app", "mirrors": [{"name": "app", "percent": 10}]}
                },
            },
        },
        "tls": {"stores": {"default": {"defaultGeneratedCert": {"resolver": "le"}}}},
    }


def check(tmp_path: Path, static: dict, dynamic: dict) -> subprocess.CompletedProcess[str]:
    (tmp_path / "dynamic.yaml").write_text(yaml.safe_dump(dynamic))
    (tmp_path / "edge.yaml").write_text(yaml.safe_dump(static))
    return subprocess.run(
        [sys.executable, "-m", "edge", "check", "--config", str(tmp_path / "edge.yaml")],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_check_names_each_unsupported_option_and_checks_the_rest(tmp_path):
    out = check(tmp_path, TRAEFIK_STATIC, traefik_dynamic("http://127.0.0.1:1"))
    lines = out.stdout.splitlines()
    nope = "not supported by this version of edge"
    dyn = str(tmp_path / "dynamic.yaml")
    for line in [
        f"static configuration: {tmp_path / 'edge.yaml'}: $.api.dashboard: {nope} (ignored)",
        f"static configuration: {tmp_path / 'edge.yaml'}: $.metrics: {nope} (ignored)",
        f"static configuration: {tmp_path / 'edge.yaml'}: $.providers.docker: {nope} (ignored)",
        f"dynamic configuration: {dyn}: $.tls.stores.default.defaultGeneratedCert: {nope} (ignored)",
        f"middleware auth@file: disabled: $.http.middlewares.auth.basicAuth: {nope}",
        f"middleware limit@file: disabled: $.http.middlewares.limit.rateLimit: {nope}",
        f"service mirror@file: disabled: $.http.services.mirror.mirroring: {nope}",
        "router site@file: enabled",
    ]:
        assert line in lines, out.stdout
    sticky = next(line for line in lines if line.startswith("service sticky@file: disabled"))
    assert f"$.http.services.sticky.loadBalancer.sticky: {nope}" in sticky
    assert f"$.http.services.sticky.loadBalancer.healthCheck: {nope}" in sticky
    for router in ("dashboard", "app", "sticky"):
        assert any(line.startswith(f"router {router}@file: disabled") for line in lines), router
    # The rest is still checked: a typo in a rule is reported as one.
    typo = next(line for line in lines if line.startswith("router typo@file: disabled"))
    assert "unknown matcher 'Pth'" in typo
    assert lines[-1] == "configuration is invalid" and out.returncode == 1

    # A refused static option makes the configuration invalid, and says so.
    static = dict(
        TRAEFIK_STATIC,
        entryPoints={"web": {"address": ":80", "http": {"middlewares": ["auth@file"]}}},
    )
    out = check(
        tmp_path,
        static,
        {
            "http": {
                "routers": {"r": {"rule": "Host(`a`)", "service": "s"}},
                "services": {"s": lb("http://127.0.0.1:1")},
            }
        },
    )
    assert (
        f"static configuration: {tmp_path / 'edge.yaml'}: $.entryPoints.web.http.middlewares: {nope} (refused)"
        in out.stdout
    )
    assert "router r@file: enabled" in out.stdout and out.returncode == 1


def test_run_serves_what_needs_nothing_edge_lacks_and_says_what_it_ignores(tmp_path, whoami):
    dynamic = traefik_dynamic(whoami.url)
    edge = Edge(
        tmp_path, dynamic, static_extra={"api": {"dashboard": True}, "metrics": {"prometheus": {}}}
    )
    try:
        assert get(edge.port, "/", host="site.test")[0] == 200
        for host in ("admin.test", "app.test", "sticky.test"):  # never served without what they ask
            assert get(edge.port, "/", host=host)[0] == 404, host
        edge.wait_for(
            r"\$\.api\.dashboard: not supported by this version of edge \(ignored\)", start=0
        )
        edge.wait_for(r"\$\.metrics: not supported by this version of edge \(ignored\)", start=0)
        edge.wait_for(
            r"middleware auth@file: \$\.http\.middlewares\.auth\.basicAuth: not supported", start=0
        )
    finally:
        edge.stop()


def test_run_refuses_to_start_on_a_refused_static_option(tmp_path):
    static = {
        "entryPoints": {"web": {"address": "127.0.0.1:0", "http": {"encodeQuerySemicolons": True}}},
        "certificatesResolvers": {"le": {"acme": {"email": "a@b.c"}}},
    }  # fmt: skip
    (tmp_path / "edge.yaml").write_text(yaml.safe_dump(static))
    out = subprocess.run(
        [sys.executable, "-m", "edge", "run", "--config", str(tmp_path / "edge.yaml")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 1
    assert "$.certificatesResolvers: not supported by this version of edge (refused)" in out.stderr
    assert (
        "$.entryPoints.web.http.encodeQuerySemicolons: not supported by this version of edge (refused)"
        in out.stderr
    )
    assert "cannot start: remove the options this version of edge does not support" in out.stderr
