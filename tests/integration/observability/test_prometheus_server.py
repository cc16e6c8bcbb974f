"""A real Prometheus server (Debian's ``prometheus``) scrapes a running edge, and
PromQL through its HTTP API returns the requests this test's client sent, per code
and router: single process and ``workers: 2``."""

from __future__ import annotations

import json
import subprocess
import time
import urllib.parse
import urllib.request

import pytest
import yaml

from tests.harness import Edge, lb, need
from tests.integration.observability.metrics_text import curl
from tests.integration.peers import free_port

QUERY = "sum by (code, router) (traefik_router_requests_total)"


class Prometheus:
    """``prometheus`` scraping ``127.0.0.1:port/metrics`` every 0.5 s, its TSDB under ``tmp``."""

    def __init__(self, tmp, port: int) -> None:
        binary = need("prometheus")
        self.api = free_port()
        config = tmp / "prometheus.yml"
        config.write_text(
            yaml.safe_dump(
                {
                    "global": {"scrape_interval": "500ms", "scrape_timeout": "400ms"},
                    "scrape_configs": [
                        {"job_name": "edge", "static_configs": [{"targets": [f"127.0.0.1:{port}"]}]}
                    ],
                }
            )
        )
        self.log = open(tmp / "prometheus.log", "wb")  # noqa: SIM115
        self.proc = subprocess.Popen(
            [
                binary,
                f"--config.file={config}",
                f"--storage.tsdb.path={tmp / 'tsdb'}",
                f"--web.listen-address=127.0.0.1:{self.api}",
            ],
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )

    def query(self, promql: str) -> list[dict] | None:
        url = f"http://127.0.0.1:{self.api}/api/v1/query?" + urllib.parse.urlencode(
            {"query": promql}
        )
        try:
            with urllib.request.urlopen(url, timeout=5) as resp:
                return json.load(resp)["data"]["result"]
        except OSError:
            return None  # not up yet

    def wait_for(self, promql: str, expected: dict, timeout: float = 60.0) -> dict:
        """The result of ``promql`` as {(code, router): value} once it equals ``expected``
        (the last one seen when ``timeout`` passes)."""
        deadline = time.monotonic() + timeout
        seen: dict = {}
        while time.monotonic() < deadline:
            result = self.query(promql)
            if result is not None:
                seen = {
                    (r["metric"].get("code"), r["metric"].get("router")): float(r["value"][1])
                    for r in result
                }
                if seen == expected:
                    break
            time.sleep(0.5)
        return seen

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=5)
        self.log.close()


def dynamic(whoami) -> dict:
    return {
        "http": {
            "routers": {
                "a": {"rule": "Host(`a.test`)", "service": "s"},
                "b": {"rule": "Host(`b.test`)", "service": "s", "middlewares": ["deny"]},
            },
            "middlewares": {"deny": {"ipAllowList": {"sourceRange": ["192.0.2.1/32"]}}},
            "services": {"s": lb(whoami.url)},
        }
    }


@pytest.mark.parametrize("workers", [1, 2])
def test_promql_counts_what_the_client_sent(tmp_path, whoami, workers):
    need("prometheus")
    static = {"metrics": {"prometheus": {"addRoutersLabels": True}}, "workers": workers}
    e = Edge(tmp_path, dynamic(whoami), static_extra=static)
    prom = Prometheus(tmp_path, e.ports["traefik"])
    try:
        for host, count in (("a.test", 7), ("b.test", 3)):
            for _ in range(count):
                curl("-o", "/dev/null", "-H", f"Host: {host}", e.url + "/")
        expected = {("200", "a@file"): 7.0, ("403", "b@file"): 3.0}
        assert prom.wait_for(QUERY, expected) == expected
    finally:
        prom.stop()
        e.stop()
