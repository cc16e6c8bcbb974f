"""loadtest/locust_local.py end to end: a short headless locust run against a local edge.

The script starts ``edge whoami`` backends (HTTP, a TLS echo, a UDP echo) and edge
(HTTP, TLS passthrough and UDP entry points) on loopback, from its own file
configuration or (``--cluster``) from k8s/examples/ served by the API server emulator
and k8s/configmap.yaml, runs the three users of loadtest/locustfile.py at once for a
few seconds, writes locust's CSV files and stops everything. Every user checks its answers (which backend, whose
certificate, its own datagram back), so zero failures means edge routed each
request where its configuration says.

locust is never imported here: importing it monkey-patches the standard library
with gevent, which the rest of the test session must not see. It runs in its
own process.
"""

from __future__ import annotations

import csv
import importlib.util
import subprocess
import sys

import pytest

from tests.harness import ROOT

SCRIPT = ROOT / "loadtest" / "locust_local.py"
DURATION = 5

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("locust") is None,
    reason="locust is not installed (pip install -e '.[load]')",
)


def run_script(tmp_path, *options: str) -> tuple[str, dict[tuple[str, str], dict]]:
    """Run locust_local.py short; its output and the stats CSV's rows by (type, name),
    once it has exited 0 with no failure anywhere."""
    prefix = tmp_path / "locust"
    done = subprocess.run(
        [sys.executable, str(SCRIPT), *options, "--duration", str(DURATION), "--users", "6",
         "--csv", str(prefix)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=DURATION + 140,
    )  # fmt: skip
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-6000:]

    with open(f"{prefix}_stats.csv", newline="") as f:
        rows = {(r["Type"], r["Name"]): r for r in csv.DictReader(f)}
    for (kind, name), row in rows.items():
        if kind:  # the Aggregated row has no type
            assert int(row["Request Count"]) > 0, (kind, name)
        assert int(row["Failure Count"]) == 0, (kind, name, output[-4000:])
    with open(f"{prefix}_failures.csv", newline="") as f:
        assert list(csv.DictReader(f)) == []
    assert "OK: every user type made requests, none failed" in done.stdout
    return done.stdout, rows


def names_by_type(rows: dict[tuple[str, str], dict]) -> dict[str, list[str]]:
    return {kind: sorted(n for (k, n) in rows if k == kind) for kind in ("GET", "TLS", "UDP")}


@pytest.mark.timeout(DURATION + 150)
def test_short_run_of_all_three_users_has_no_failures(tmp_path):
    _, rows = run_script(tmp_path)
    names = names_by_type(rows)
    # every route of the HTTP user, the passthrough name, and the UDP entry point
    assert names["GET"] == [
        "api.example.test/",
        "web.example.test/",
        "web.example.test/api/users",
    ], rows.keys()
    assert names["TLS"] == ["echo.example.test"], rows.keys()
    assert len(names["UDP"]) == 1, rows.keys()


@pytest.mark.timeout(DURATION + 150)
def test_the_cluster_examples_through_the_api_server_emulator(tmp_path):
    """``--cluster``: k8s/examples/ (an Ingress, an IngressRoute with a Middleware, a
    passthrough and a terminating IngressRouteTCP, an IngressRouteUDP) in the API server
    emulator, edge on k8s/configmap.yaml. The script checks the Middleware and the
    terminated route before the load; the TLS user pins the echo's own certificate (the
    Secret echo-tls), so a passthrough route that were missing, or that edge terminated,
    fails every TLS request."""
    stdout, rows = run_script(tmp_path, "--cluster")
    assert "checked: whoami.example.test/whoami/hello -> web /hello (stripPrefix applied)" in (
        stdout
    )
    assert "checked: tcp.example.test -> terminated with the Secret tcp-tls's certificate" in (
        stdout
    )
    names = names_by_type(rows)
    assert names["GET"] == [  # the Ingress' routes and the IngressRoute's
        "api.example.test/",
        "web.example.test/",
        "web.example.test/api/users",
        "whoami.example.test/whoami/",
    ], rows.keys()
    assert names["TLS"] == ["echo.example.test"], rows.keys()
    assert len(names["UDP"]) == 1, rows.keys()
