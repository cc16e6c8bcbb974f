"""edge.descriptors.Budget: admission against a descriptor table whose limit, count and
clock the test sets, so every count the budget makes is seen."""

from __future__ import annotations

import os
import resource

import pytest

from edge.descriptors import BACKOFF, PER_CONNECTION, Budget, count_open


class Table:
    """A descriptor table: ``limit``, ``open`` descriptors, and the counts made of it."""

    def __init__(self, limit: int, open_: int) -> None:
        self.limit = limit
        self.open = open_
        self.counts = 0
        self.now = 100.0

    def count(self) -> int:
        self.counts += 1
        return self.open

    def budget(self, reserve: int = 64, internal_reserve: int = 16) -> Budget:
        return Budget(
            reserve=reserve,
            internal_reserve=internal_reserve,
            limit=lambda: self.limit,
            count=self.count,
            clock=lambda: self.now,
        )


def test_one_count_grants_a_third_of_the_room_above_the_reserve() -> None:
    table = Table(1000, 100)
    budget = table.budget()
    granted = (1000 - 64 - 100) // PER_CONNECTION
    assert all(budget.admit() for _ in range(granted))
    assert table.counts == 1
    table.open += PER_CONNECTION * granted  # each took what it was budgeted
    assert not budget.admit()  # the second count finds the table at the reserve
    assert table.counts == 2


def test_a_full_table_is_counted_again_only_after_the_backoff() -> None:
    table = Table(256, 256 - 64)
    budget = table.budget()
    assert not any(budget.admit() for _ in range(1000))
    assert table.counts == 1  # a shed costs a clock read, not a count
    table.open = 100  # connections closed
    table.now += BACKOFF / 2
    assert not budget.admit()
    assert table.counts == 1
    table.now += BACKOFF / 2
    assert budget.admit()  # admitted again at the first count after the backoff
    assert table.counts == 2


def test_the_internal_entry_point_serves_from_the_room_between_the_reserves() -> None:
    table = Table(256, 256 - 64)
    budget = table.budget()
    assert not budget.admit()
    room = (64 - 16) // PER_CONNECTION
    assert all(budget.admit(internal=True) for _ in range(room))
    table.open = 256 - 16
    assert not budget.admit(internal=True)
    counts = table.counts
    assert not any(budget.admit(internal=True) for _ in range(100))
    assert table.counts == counts  # its own backoff
    assert not budget.admit()  # the data plane stays shut


def test_the_limit_is_read_at_each_count() -> None:
    table = Table(256, 256 - 64)
    budget = table.budget()
    assert not budget.admit()
    table.limit = 4096  # raised while running (prlimit --pid)
    table.now += BACKOFF
    assert budget.admit()


def test_no_limit_or_no_count_admits() -> None:
    unlimited = Budget(limit=lambda: 0, count=lambda: 10)
    uncounted = Budget(limit=lambda: 100, count=lambda: -1)
    assert all(unlimited.admit() and uncounted.admit() for _ in range(1000))


def test_reserves_must_nest() -> None:
    with pytest.raises(ValueError, match=r"internal 65 must be within 0\.\.64"):
        Budget(reserve=64, internal_reserve=65)


def test_count_open_counts_this_process() -> None:
    before = count_open()
    fds = [os.open(os.devnull, os.O_RDONLY) for _ in range(10)]
    try:
        assert count_open() == before + 10
    finally:
        for fd in fds:
            os.close(fd)
    assert 0 < before < resource.getrlimit(resource.RLIMIT_NOFILE)[0]
