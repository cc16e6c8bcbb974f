"""The configuration watcher: duplicates, per-provider throttling, merging, listeners, readiness."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any

from edge.config.dynamic import Configuration
from edge.config.loader import decode_dynamic
from edge.config.runtime import RuntimeConfig
from edge.watcher import Message, Watcher

EPS = {"web": "tcp"}
TIMEOUT = 10.0
BURN = 10.0
"""The most seconds a Building listener burns or waits in one prepare."""


def run(coro: Awaitable[Any], timeout: float = TIMEOUT) -> Any:
    """Run ``coro`` on a fresh loop, failing the test if it takes over ``timeout`` seconds."""

    async def bounded() -> Any:
        return await asyncio.wait_for(coro, timeout)

    return asyncio.run(bounded())


async def until(predicate: Callable[[], bool], timeout: float = 4.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not predicate():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError("condition not met in time")
        await asyncio.sleep(0.005)


def config(n: int, service: str = "app") -> Configuration:
    return decode_dynamic(
        {
            "http": {
                "routers": {f"r{n}": {"rule": f"Host(`h{n}`)", "service": service}},
                "services": {
                    service: {"loadBalancer": {"servers": [{"url": f"http://10.0.0.1:{9000 + n}"}]}}
                },
            }
        }
    )


class Recorder:
    def __init__(self) -> None:
        self.snapshots: list[RuntimeConfig] = []

    def __call__(self, runtime: RuntimeConfig) -> None:
        self.snapshots.append(runtime)

    def routers(self, i: int = -1) -> list[str]:
        return list(self.snapshots[i].http_routers)


def test_first_configuration_applies_at_once_and_duplicates_are_dropped() -> None:
    async def main() -> None:
        rec = Recorder()
        w = Watcher(entry_points=EPS, throttle=0.0, listeners=[rec])
        w.publish(Message("file", config(1)))
        assert w.applied == 1 and rec.routers() == ["r1@file"]
        w.publish(Message("file", config(1)))  # identical: dropped
        w.publish(Message("file", config(1)))
        assert w.applied == 1
        w.publish(Message("file", config(2)))
        assert w.applied == 2 and rec.routers() == ["r2@file"]
        await w.close()

    run(main())


def test_burst_is_coalesced_into_first_and_last() -> None:
    async def main() -> None:
        rec = Recorder()
        # The window well over the 0.1 s slept: a loop that wakes late on a loaded
        # machine runs the window's timer before this coroutine resumes.
        w = Watcher(entry_points=EPS, throttle=0.6, listeners=[rec])
        for i in range(20):
            w.publish(Message("file", config(i)))
        assert w.applied == 1 and rec.routers() == ["r0@file"]
        await asyncio.sleep(0.1)
        assert w.applied == 1  # still inside the window
        await until(lambda: w.applied == 2)
        assert rec.routers() == ["r19@file"]
        await asyncio.sleep(0.3)
        assert w.applied == 2  # nothing else pending
        await w.close()

    run(main())


def test_per_message_throttle_overrides_the_global_one() -> None:
    async def main() -> None:
        rec = Recorder()
        w = Watcher(entry_points=EPS, throttle=60.0, listeners=[rec])
        w.publish(Message("k8s", config(1)), throttle=0.05)
        w.publish(Message("k8s", config(2)), throttle=0.05)
        await until(lambda: w.applied == 2)
        assert rec.routers() == ["r2@k8s"]
        await w.close()

    run(main())


def test_back_to_applied_within_window_is_not_reapplied() -> None:
    async def main() -> None:
        rec = Recorder()
        w = Watcher(entry_points=EPS, throttle=0.1, listeners=[rec])
        w.publish(Message("file", config(1)))
        w.publish(Message("file", config(2)))
        w.publish(Message("file", config(1)))  # back to what is applied
        await asyncio.sleep(0.25)
        assert w.applied == 1
        await w.close()

    run(main())


def test_throttling_is_per_provider_and_configurations_are_merged() -> None:
    async def main() -> None:
        rec = Recorder()
        w = Watcher(entry_points=EPS, throttle=10.0, listeners=[rec])
        w.publish(Message("file", config(1)))
        w.publish(Message("k8s", config(2)))  # another provider's first: applied at once
        assert w.applied == 2
        assert rec.routers() == ["r1@file", "r2@k8s"]
        assert rec.snapshots[-1].http_routers["r2@k8s"].config.service == "app@k8s"
        assert all(info.status == "enabled" for info in rec.snapshots[-1].http_routers.values())
        await w.close()

    run(main())


def test_listeners_run_in_order_and_a_raising_one_does_not_stop_the_rest(caplog) -> None:
    async def main() -> None:
        calls: list[str] = []

        def first(rt: RuntimeConfig) -> None:
            calls.append("first")

        def broken(rt: RuntimeConfig) -> None:
            calls.append("broken")
            raise RuntimeError("listener bug")

        def last(rt: RuntimeConfig) -> None:
            calls.append("last")

        w = Watcher(entry_points=EPS, throttle=0.0, listeners=[first, broken, last])
        w.publish(Message("file", config(1)))
        w.publish(Message("file", config(2)))
        assert calls == ["first", "broken", "last"] * 2
        assert w.applied == 2
        await w.close()

    with caplog.at_level(logging.ERROR, logger="edge.watcher"):
        run(main())
    assert any("listener" in r.getMessage() and "broken" in r.getMessage() for r in caplog.records)


def test_readiness_waits_for_every_expected_provider() -> None:
    async def main() -> None:
        w = Watcher(entry_points=EPS, throttle=0.0, listeners=[])
        assert w.ready  # nothing expected
        w.expect("file")
        w.expect("k8s")
        assert not w.ready
        w.publish(Message("file", config(1)))
        assert not w.ready
        w.publish(Message("k8s", config(2)))
        assert w.ready
        await w.close()

    run(main())


def test_validation_errors_are_logged_with_the_element(caplog) -> None:
    async def main() -> None:
        rec = Recorder()
        w = Watcher(entry_points=EPS, throttle=0.0, listeners=[rec])
        w.publish(Message("file", config(1, service="app")))
        bad = decode_dynamic({"http": {"routers": {"r": {"rule": "Host(`x`)", "service": "nope"}}}})
        w.publish(Message("k8s", bad))
        assert rec.snapshots[-1].http_routers["r@k8s"].status == "disabled"
        assert rec.snapshots[-1].http_routers["r1@file"].status == "enabled"
        await w.close()

    with caplog.at_level(logging.WARNING, logger="edge.watcher"):
        run(main())
    assert "router r@k8s: service 'nope@k8s' does not exist" in caplog.text


def test_an_error_is_logged_once_while_it_lasts_and_its_end_is_said(caplog) -> None:
    """Rounds that leave a broken router broken (endpoint churn elsewhere) do not log its
    error again; the round that mends it says so; breaking it again logs it again."""
    bad = decode_dynamic({"http": {"routers": {"r": {"rule": "Host(`x`)", "service": "nope"}}}})
    fixed = decode_dynamic(
        {
            "http": {
                "routers": {"r": {"rule": "Host(`x`)", "service": "nope"}},
                "services": {
                    "nope": {"loadBalancer": {"servers": [{"url": "http://10.0.0.9:80"}]}}
                },
            }
        }
    )
    error = "router r@k8s: service 'nope@k8s' does not exist"

    def count(text: str) -> int:
        return sum(text in r.getMessage() for r in caplog.records)

    async def main() -> None:
        w = Watcher(entry_points=EPS, throttle=0.0, listeners=[Recorder()])
        w.publish(Message("k8s", bad))
        for i in range(1, 4):  # three rounds that change only the file provider's servers
            w.publish(Message("file", config(1 + i)))
        assert w.applied == 4
        assert count(error) == 1
        w.publish(Message("k8s", fixed))
        assert count("router r@k8s: resolved: service 'nope@k8s' does not exist") == 1
        w.publish(Message("k8s", bad))
        assert count(error) == 2
        await w.close()

    with caplog.at_level(logging.INFO, logger="edge.watcher"):
        run(main())


def test_publish_threadsafe() -> None:
    async def main() -> None:
        rec = Recorder()
        w = Watcher(
            entry_points=EPS, throttle=0.0, listeners=[rec], loop=asyncio.get_running_loop()
        )
        t = threading.Thread(target=w.publish_threadsafe, args=(Message("k8s", config(3)),))
        t.start()
        t.join(TIMEOUT)
        await until(lambda: w.applied == 1)
        assert rec.routers() == ["r3@k8s"]
        await w.close()

    run(main())


def test_listener_publishing_triggers_another_round() -> None:
    async def main() -> None:
        rec = Recorder()
        w: Watcher

        def republish(rt: RuntimeConfig) -> None:
            if w.applied == 0:
                w.publish(Message("other", config(9)))

        w = Watcher(entry_points=EPS, throttle=0.0, listeners=[republish, rec])
        w.publish(Message("file", config(1)))
        assert w.applied == 2
        assert rec.routers() == ["r1@file", "r9@other"]
        await w.close()

    run(main())


def test_close_drops_pending_configurations() -> None:
    async def main() -> None:
        rec = Recorder()
        w = Watcher(entry_points=EPS, throttle=0.05, listeners=[rec])
        w.publish(Message("file", config(1)))
        w.publish(Message("file", config(2)))
        await w.close()
        await asyncio.sleep(0.15)
        w.publish(Message("file", config(3)))
        assert w.applied == 1

    run(main())


def test_an_empty_configuration_is_applied() -> None:
    # Unlike Traefik, an empty configuration is not skipped: emptying a file removes
    # its routes, and a provider with nothing to say still counts for readiness.
    async def main() -> None:
        rec = Recorder()
        w = Watcher(entry_points=EPS, throttle=0.0, listeners=[rec])
        w.expect("k8s")
        w.publish(Message("file", config(1)))
        w.publish(Message("k8s", Configuration()))
        assert w.ready
        w.publish(Message("file", Configuration()))
        assert w.applied == 3 and rec.routers() == []
        await w.close()

    run(main())


# -- offload: rounds prepared in a worker thread, committed on the loop


class Building:
    """A listener that builds in ``prepare`` (as the Dataplane builds its routers).

    ``burn_until``: ``prepare`` burns CPU until it holds (at most ``BURN`` seconds);
    ``release``: ``prepare`` then waits for it to be set (at most ``BURN`` seconds)."""

    def __init__(
        self,
        burn_until: Callable[[], bool] | None = None,
        release: threading.Event | None = None,
    ) -> None:
        self.burn_until = burn_until
        self.release = release
        self.prepared_in: list[str] = []
        self.burnt: list[tuple[float, float, bool]] = []  # (start, end, held) per round
        self.committed_in: list[str] = []
        self.routers: list[list[str]] = []

    def prepare(self, runtime: RuntimeConfig) -> Callable[[], None]:
        self.prepared_in.append(threading.current_thread().name)
        if self.burn_until is not None:
            start = time.monotonic()
            # CPU-bound, holding the GIL as a router build does
            while not (held := self.burn_until()) and time.monotonic() < start + BURN:
                sum(range(1000))
            self.burnt.append((start, time.monotonic(), held))
        if self.release is not None:
            self.release.wait(BURN)
        routers = list(runtime.http_routers)

        def commit() -> None:
            self.committed_in.append(threading.current_thread().name)
            self.routers.append(routers)

        return commit

    def __call__(self, runtime: RuntimeConfig) -> None:
        raise AssertionError("a preparing listener is committed, not called")


def test_offloaded_rounds_are_prepared_off_the_loop_and_committed_on_it() -> None:
    async def main() -> None:
        rec, building = Recorder(), Building()
        w = Watcher(entry_points=EPS, throttle=0.0, listeners=[building, rec], offload=True)
        w.publish(Message("file", config(1)))
        assert w.applied == 0  # prepared in the worker thread: not yet
        await until(lambda: w.applied == 1)
        w.publish(Message("file", config(2)))
        w.publish(Message("k8s", config(3)))  # before the round starts: both in one round
        await until(lambda: w.applied == 2)
        assert building.routers == [["r1@file"], ["r2@file", "r3@k8s"]]
        assert rec.routers() == ["r2@file", "r3@k8s"]
        loop_thread = threading.current_thread().name
        assert building.prepared_in and all(t != loop_thread for t in building.prepared_in)
        assert building.committed_in == [loop_thread, loop_thread]
        await w.close()

    run(main())


def test_an_offloaded_round_does_not_stall_the_loop() -> None:
    """A listener whose build burns CPU until the loop has ticked 50 times: offloaded,
    the loop ticks meanwhile (inline, the build would burn its whole BURN seconds with
    no tick). Counting ticks, not seconds, keeps this true on a loaded machine."""

    async def main() -> None:
        loop = asyncio.get_running_loop()
        ticks: list[float] = []  # time.monotonic() of each tick
        gaps: list[float] = []
        done = asyncio.Event()

        def tick(last: float) -> None:
            now = loop.time()
            ticks.append(time.monotonic())
            gaps.append(now - last)
            if not done.is_set():
                loop.call_later(0.001, tick, now)

        building = Building(burn_until=lambda: len(ticks) >= 60)
        w = Watcher(entry_points=EPS, throttle=0.0, listeners=[building], offload=True)
        loop.call_soon(tick, loop.time())
        await until(lambda: len(ticks) >= 10)
        w.publish(Message("file", config(1)))
        await until(lambda: w.applied == 1, timeout=BURN + 5.0)
        done.set()
        [(start, end, held)] = building.burnt
        during = [t for t in ticks if start <= t <= end]
        assert held and len(during) >= 40, "the loop ran while the round was prepared"
        assert max(gaps) < 0.5
        await w.close()

    run(main(), timeout=BURN + 10.0)


def test_closing_during_an_offloaded_round_applies_nothing() -> None:
    async def main() -> None:
        release = threading.Event()
        building = Building(release=release)
        w = Watcher(entry_points=EPS, throttle=0.0, listeners=[building], offload=True)
        w.publish(Message("file", config(1)))
        await until(lambda: bool(building.prepared_in))  # the round is being prepared
        closing = asyncio.create_task(w.close())
        await asyncio.sleep(0)  # close() has begun: it waits for the round
        release.set()
        await closing
        assert w.applied == 0 and building.routers == [] and building.prepared_in

    run(main())


def test_the_default_rule_syntax_reaches_validation() -> None:
    """core.defaultRuleSyntax: v2 reads a router without its own ruleSyntax as v2."""

    def v2_only() -> Configuration:
        return decode_dynamic(
            {
                "http": {
                    "routers": {"r": {"rule": "Host(`a.test`, `b.test`)", "service": "app"}},
                    "services": {
                        "app": {"loadBalancer": {"servers": [{"url": "http://10.0.0.1:9000"}]}}
                    },
                }
            }
        )

    async def main() -> None:
        for syntax, status in (("v2", "enabled"), ("v3", "disabled")):
            rec = Recorder()
            w = Watcher(entry_points=EPS, throttle=0.0, listeners=[rec], default_rule_syntax=syntax)
            w.publish(Message("file", v2_only()))
            assert rec.snapshots[-1].http_routers["r@file"].status == status, syntax
            await w.close()

    run(main())
