"""Hot reload under load: routes change 200 times while wrk hammers one of them.

Nothing may be dropped: zero non-2xx answers, zero socket errors. Bounded: wrk
runs for a fixed time, the rewrite loop has a fixed count. Both HTTP codecs are
loaded at once, each on an entry point of its own in one edge (one wrk each), so
the 200 reloads reach both without a second edge and a second 20 s run.
"""

from __future__ import annotations

import re
import subprocess
import time

import pytest

from tests.harness import LISTEN_RE, Edge, need

PARSERS = ("httptools", "h11")
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
def test_reload_200_times_under_wrk_loses_nothing(tmp_path, whoami, whoami2):
    wrk = need("wrk")
    entrypoints = {
        parser: {"address": "127.0.0.1:0", "http": {"parser": parser}} for parser in PARSERS
    }
    entrypoints["traefik"] = {"address": "127.0.0.1:0"}
    # static_extra sets each entry point's own parser (``parser=`` would set one for all).
    e = Edge(
        tmp_path,
        config(whoami, whoami2, 0),
        entrypoints={name: {"address": "127.0.0.1:0"} for name in entrypoints},
        static_extra={"entryPoints": entrypoints},
    )
    outs: dict[str, str] = {}
    try:
        ports = {m.group(1): int(m.group(3)) for m in e.all_matches(LISTEN_RE.pattern)}
        for parser in PARSERS:  # each entry point reads with its own codec
            assert e.all_matches(rf"entrypoint {parser}: listening on \S+ \({parser}\)"), e.log
        load = [wrk, "-t1", "-c50", f"-d{DURATION}s", "-H", "Host: load.test"]
        procs = {
            parser: subprocess.Popen(
                [*load, f"http://127.0.0.1:{ports[parser]}/"],
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
            for parser in PARSERS
        }
        time.sleep(0.5)
        applied_before = e.applied()
        interval = (DURATION - 3) / REWRITES
        for i in range(1, REWRITES + 1):
            e.write_dynamic(config(whoami, whoami2, i))
            time.sleep(interval)
        for parser, proc in procs.items():
            outs[parser] = proc.communicate(timeout=DURATION + 30)[0]
        applied = e.applied() - applied_before
    finally:
        e.stop()
    for parser, out in outs.items():
        print(parser, out)
        requests = int(re.search(r"(\d+) requests in", out).group(1))
        assert requests > 1000, (parser, out)
        assert "Non-2xx" not in out, (parser, out)
        assert "Socket errors" not in out, (parser, out)
    # The file changes every ~85 ms; the file provider polls every 250 ms and
    # reads a source that never stops changing at least every 500 ms, so many
    # rewrites merge into one read. Dozens of new router sets went live.
    assert applied >= 20, f"only {applied} configurations applied"
