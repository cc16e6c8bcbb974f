"""loadtest/locust_local.py end to end: a short headless locust run against a local edge.

The script starts two ``edge whoami`` backends, a TLS echo server and edge
(HTTP, TLS passthrough and UDP entry points) on loopback, runs the three users
of loadtest/locustfile.py at once for a few seconds, writes locust's CSV files
and stops everything. Every user checks its answers (which backend, whose
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


@pytest.mark.timeout(DURATION + 150)
def test_short_run_of_all_three_users_has_no_failures(tmp_path):
    prefix = tmp_path / "locust"
    done = subprocess.run(
        [
            sys.executable,
            str(SCRIPT),
            "--duration",
            str(DURATION),
            "--users",
            "6",
            "--csv",
            str(prefix),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=DURATION + 140,
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-6000:]

    with open(f"{prefix}_stats.csv", newline="") as f:
        rows = {(r["Type"], r["Name"]): r for r in csv.DictReader(f)}
    names = {kind: [n for (k, n) in rows if k == kind] for kind in ("GET", "TLS", "UDP")}
    # every route of the HTTP user, the passthrough name, and the UDP entry point
    assert sorted(names["GET"]) == [
        "api.example.test/",
        "web.example.test/",
        "web.example.test/api/users",
    ], rows.keys()
    assert names["TLS"] == ["echo.example.test"], rows.keys()
    assert len(names["UDP"]) == 1, rows.keys()
    for (kind, name), row in rows.items():
        if kind:  # the Aggregated row has no type
            assert int(row["Request Count"]) > 0, (kind, name)
        assert int(row["Failure Count"]) == 0, (kind, name, output[-4000:])

    with open(f"{prefix}_failures.csv", newline="") as f:
        assert list(csv.DictReader(f)) == []
    assert "OK: every user type made requests, none failed" in done.stdout
