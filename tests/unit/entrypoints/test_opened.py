"""Entry points opened at run time (edge.entrypoints.opened): what a validated
configuration opens and closes, what a port that cannot be bound leaves (an error,
followers told, a round asked for later), with stand-in entry points on a real loop."""

from __future__ import annotations

import asyncio

import pytest

from edge.config.merge import merge
from edge.config.runtime import build_runtime
from edge.config.static import EntryPoint as EntryPointConfig
from edge.config.static import EntryPointKind, RuntimeDefaults
from edge.entrypoints import EntryPoints
from edge.entrypoints.opened import OpenedEntryPoints
from edge.transports import TransportRegistry
from tests.unit.config.documents import conf, lb


class StandIn:
    """An entry point that binds when told (``fails``: the OSError it raises)."""

    fails: dict[str, OSError] = {}

    def __init__(self, name: str, config: EntryPointConfig) -> None:
        self.name = name
        self.config = config
        self.started = self.stopped = self.drained = False

    @property
    def port(self) -> int:
        return self.config.port

    async def start(self) -> None:
        if self.name in self.fails:
            raise self.fails[self.name]
        self.started = True

    def bound(self, ports: dict[str, int]) -> None:
        pass

    def stop_accepting(self) -> None:
        self.stopped = True

    async def drain(self, grace: float) -> None:
        self.drained = True


def runtime(*names: str):
    """A configuration whose routers name ``names`` (with runtimeEntryPoints on)."""
    opens = RuntimeDefaults(opens=True)
    kinds = {"web": EntryPointKind("tcp", None, opens)}
    routers = {
        f"r{i}": {"rule": "Host(`a`)", "service": "app", "entryPoints": [name]}
        for i, name in enumerate(names)
    }
    doc = {"http": {"routers": routers, "services": {"app": lb("http://127.0.0.1:1")}}}
    return build_runtime(merge({"file": conf(doc)}), kinds)


FIRST = 0.05
"""The first wait before a round retries a port here (edge's default is a second)."""


async def until(condition, timeout: float = 10.0) -> None:
    """Return once ``condition()`` holds, polling the loop; fail after ``timeout`` s."""
    deadline = asyncio.get_running_loop().time() + timeout
    while not condition():
        assert asyncio.get_running_loop().time() < deadline, "not within the timeout"
        await asyncio.sleep(0.01)


@pytest.fixture
def loop():
    loop = asyncio.new_event_loop()
    yield loop
    loop.close()


def test_a_round_opens_what_routers_name_and_closes_what_they_no_longer_do(loop) -> None:
    async def main() -> None:
        eps = EntryPoints(loop, TransportRegistry(loop))
        eps.add(StandIn("web", EntryPointConfig(address=":80")))  # type: ignore[arg-type]
        opened = OpenedEntryPoints(eps, "127.0.0.1", StandIn, loop)  # type: ignore[arg-type]
        plan = opened.plan(runtime(":8080", ":9090"))
        assert sorted(plan.new) == [":8080", ":9090"] and not plan.gone
        assert plan.new[":8080"].config.address == "127.0.0.1:8080"
        assert set(eps.all) == {"web"}  # planning changes nothing live
        opened.commit(plan)
        await asyncio.sleep(0.01)
        assert set(eps.all) == {"web", ":8080", ":9090"}
        assert all(ep.started for ep in opened.open.values())  # type: ignore[attr-defined]
        again = opened.plan(runtime(":8080", ":9090"))
        assert not again.new and not again.gone  # nothing to do: the same entry points
        gone = opened.open[":9090"]
        opened.commit(opened.plan(runtime(":8080")))
        await asyncio.sleep(0.01)
        assert gone.stopped and gone.drained  # type: ignore[attr-defined]
        assert set(eps.all) == {"web", ":8080"}
        opened.commit(opened.plan(runtime()))
        await asyncio.sleep(0.01)
        assert set(eps.all) == {"web"}

    loop.run_until_complete(main())


def test_a_port_that_cannot_be_bound_is_an_error_told_and_tried_again(loop) -> None:
    async def main() -> None:
        eps = EntryPoints(loop, TransportRegistry(loop))
        told: list[dict] = []
        rounds: list[float] = []
        opened = OpenedEntryPoints(
            eps,
            "",
            StandIn,  # type: ignore[arg-type]
            loop,
            retry=lambda: rounds.append(loop.time()),
            retry_after=(FIRST, 30.0),
        )
        opened.follow(lambda: told.append(dict(opened.errors)))
        StandIn.fails = {":80": PermissionError(13, "Permission denied")}
        try:
            failed = loop.time()
            opened.commit(opened.plan(runtime(":80")))
            await asyncio.sleep(0.01)
            assert opened.errors == {":80": "Permission denied"}
            assert told == [{":80": "Permission denied"}]
            assert ":80" not in eps.all and ":80" not in opened.open
            await until(lambda: rounds)  # retry_after[0]: a round is asked for
            assert len(rounds) == 1 and rounds[0] - failed >= FIRST
            again = loop.time()
            opened.commit(opened.plan(runtime(":80")))  # that round: the same error again
            await asyncio.sleep(0.01)
            assert len(told) == 1  # said once while it lasts
            await until(lambda: len(rounds) == 2)  # the wait doubled
            assert rounds[1] - again >= 2 * FIRST
            StandIn.fails = {}
            opened.commit(opened.plan(runtime(":80")))
            await asyncio.sleep(0.01)
            assert opened.errors == {} and told[-1] == {} and ":80" in eps.all
        finally:
            StandIn.fails = {}
            opened.close()

    loop.run_until_complete(main())
