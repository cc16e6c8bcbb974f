"""Hot reload under load: routes change 200 times while wrk hammers one of them.

Nothing may be dropped: zero non-2xx answers, zero socket errors. Bounded: wrk
runs for a fixed time, the rewrite loop has a fixed count.
"""

from __future__ import annotations

import re
import subprocess
import time

import pytest

from tests.harness import Edge, need

DURATION = 20
REWRITES = 200


def config(whoami, whoami2, i: int) -> dict:
    routers = {"main": {"rule": "Host(`load.test`)", "service": "main"}}
    # Other routers come and go; the weights of the loaded service change.
    for k in range(i % 7):
        routers[f"extra-{i}-{k}"] = {
            "rule": f"Host(`x{k}.test`) && PathPrefix(`/{i}`)",
            "service": "other",
        }
    return {
        "http": {
            "routers": routers,
            "services": {
                "main": {
                    "loadBalancer": {
                        "servers": [
                            {"url": whoami.url, "weight": 1 + i % 3},
                            {"url": whoami2.url, "weight": 1 + (i + 1) % 4},
                        ]
                    }
                },
                "other": {"loadBalancer": {"servers": [{"url": whoami2.url}]}},
            },
        }
    }


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_reload_200_times_under_wrk_loses_nothing(tmp_path, parser, whoami, whoami2):
    wrk = need("wrk")
    e = Edge(tmp_path, config(whoami, whoami2, 0), parser=parser)
    try:
        proc = subprocess.Popen(
            [wrk, "-t1", "-c50", f"-d{DURATION}s", "-H", "Host: load.test", f"{e.url}/"],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        time.sleep(0.5)
        applied_before = e.applied()
        interval = (DURATION - 3) / REWRITES
        for i in range(1, REWRITES + 1):
            e.write_dynamic(config(whoami, whoami2, i))
            time.sleep(interval)
        out, _ = proc.communicate(timeout=DURATION + 30)
        applied = e.applied() - applied_before
    finally:
        e.stop()
    print(out)
    requests = int(re.search(r"(\d+) requests in", out).group(1))
    assert requests > 1000, out
    assert "Non-2xx" not in out, out
    assert "Socket errors" not in out, out
    # The file changes every ~85 ms; the file provider polls every 250 ms and
    # reads a source that never stops changing at least every 500 ms, so many
    # rewrites merge into one read. Dozens of new router sets went live.
    assert applied >= 20, f"only {applied} configurations applied"
