"""loadtest/kube_scale.py, kube_churn_round.py and kube_provider_scale.py, run small.

The scale scripts import the providers' conversions, the validation and the router
factory, which change often; these runs keep them working: each script at a few dozen
objects, in its own process, for both clusters (the kubernetesIngress provider's and,
``--crd``, the kubernetesCRD provider's), must exit 0 and print what it measured.
``kube_scale`` asserts that the cluster converts without a problem and that an
endpoints-only change is one (``update_endpoints`` equal to a whole conversion);
``kube_provider_scale`` runs a real ``edge run`` against the API server emulator to
its first swap and one round of each kind.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.harness import ROOT

LOADTEST = ROOT / "loadtest"
CRD_SMALL = ["--crd", "--routes", "20", "--tcp-routes", "4", "--udp-routes", "2",
             "--total-endpoints", "80"]  # fmt: skip


def run(script: str, *options: str, timeout: float = 120) -> str:
    done = subprocess.run(
        [sys.executable, str(LOADTEST / script), *options],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-6000:]
    return done.stdout


def test_kube_scale_crd_cluster_phases() -> None:
    """The CRD cluster converts without a problem into the routers it should (two per
    IngressRoute, one per IngressRouteTCP and IngressRouteUDP), and every phase is timed."""
    out = run("kube_scale.py", *CRD_SMALL, "--changed", "2", "--repeat", "1")
    assert "20 IngressRoute, 4 IngressRouteTCP, 2 IngressRouteUDP" in out
    assert "(80 endpoints)" in out
    assert "40 http routers / 40 services, 4 tcp routers / 4 services, " in out
    assert "2 udp routers / 2 services" in out
    for phase in ("convert", "build routers", "update (2 slices): update_endpoints",
                  "edit: build routers", "LIST bodies -> router sets (sum)"):  # fmt: skip
        assert re.search(rf"{re.escape(phase)}\s+\d+\s+\d+", out), (phase, out)


def test_kube_scale_ingress_cluster_and_profile() -> None:
    out = run("kube_scale.py", "--ingresses", "20", "--changed", "2", "--repeat", "1",
              "--profile", "--top", "3", "--profile-least", "0")  # fmt: skip
    assert "20 Ingress, 1 IngressClass, 20 Service" in out
    # two paths each, and one Ingress in ten has TLS: a -tls router per path too
    assert "44 http routers / 20 services" in out
    assert "--- cProfile: convert (all runs), by own time ---" in out


@pytest.mark.parametrize(
    "options",
    [
        ["--ingresses", "20"],
        CRD_SMALL,
        [*CRD_SMALL, "--full"],
        [*CRD_SMALL, "--slices", "tcp"],
    ],
    ids=["ingress", "crd", "crd-full", "crd-tcp"],
)
def test_kube_churn_round(options: list[str]) -> None:
    """Every round, TCP/UDP slices' too, is applied in place (the script fails a round
    that would rebuild the routers)."""
    out = run("kube_churn_round.py", *options, "--changed", "2", "--rounds", "2")
    assert re.search(r"2 rounds \(.*; all in place\): [\d.]+ ms CPU", out), out


@pytest.mark.skipif(
    not all(shutil.which(t) or Path(f"/usr/sbin/{t}").exists() for t in ("wrk", "nginx")),
    reason="kube_provider_scale.py needs wrk and nginx",
)
def test_kube_provider_scale_crd_first_swap_and_rounds(tmp_path: Path) -> None:
    """edge run against the emulator: a first swap (with a LIST before it), one round of
    each kind applied, the figures in the JSON."""
    import json

    out = run("kube_provider_scale.py", *CRD_SMALL, "--first-swap-only", "--swaps", "1",
              "--rounds", "1", "--changed", "2", "--throttle", "200ms", "--json",
              str(tmp_path / "out.json"), timeout=240)  # fmt: skip
    assert "first router swap:" in out
    results = json.loads((tmp_path / "out.json").read_text())
    swap = results["first_swap"]
    assert 0 < swap["from_first_list_s"] < swap["from_process_start_s"]
    assert swap["conversion_s"] is not None
    assert set(results["rounds"]) == {
        "endpoints (2 HTTP slices)", "endpoints (2 TCP/UDP slices)", "edit (one route's match)"
    }  # fmt: skip
    assert results["memory_after_first_swap_mib"]["VmRSS"] > 0
