"""edge.udp.sessions: the session table (filed by key, bounded, expiring each session on its
own timeout) and its counters."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from edge.udp.sessions import Counters, Session, SessionTable


def session(client, timeout: float = 3.0) -> Session:
    return Session(client, Counters("r", "s"), timeout=timeout)


def test_sessions_are_filed_under_their_key():
    """A session read by recvmmsg is filed under its raw sockaddr, not its address tuple:
    lookup, the duplicate check, eviction, removal and expiry all go by the key."""
    table = SessionTable(max_sessions=2)
    a = Session(("10.0.0.1", 1), Counters("r", "s"), timeout=1.0, key=b"raw-a")
    b = Session(("10.0.0.1", 2), Counters("r", "s"), timeout=1.0, key=b"raw-b")
    assert table.add(a, now=0.0) is None and table.add(b, now=1.0) is None
    assert table.get(b"raw-a") is a and table.get(("10.0.0.1", 1)) is None
    with pytest.raises(KeyError):
        table.add(Session(("10.9.9.9", 9), Counters("r", "s"), timeout=1.0, key=b"raw-a"), 2.0)
    c = Session(("10.0.0.1", 3), Counters("r", "s"), timeout=1.0, key=b"raw-c")
    assert table.add(c, now=2.0) is a and table.get(b"raw-a") is None
    assert table.remove(b) is True and table.get(b"raw-b") is None
    assert table.expire(now=10.0, shortest=1.0) == [c] and len(table) == 0
    assert session(("10.0.0.1", 4)).key == ("10.0.0.1", 4)  # no key: the address itself


def test_add_get_and_len():
    table = SessionTable(10)
    a = session(("1.1.1.1", 1))
    assert table.add(a, now=1.0) is None
    assert table.get(("1.1.1.1", 1)) is a and a.last == 1.0
    assert len(table) == 1
    assert table.get(("1.1.1.1", 2)) is None
    with pytest.raises(KeyError):
        table.add(session(("1.1.1.1", 1)), now=2.0)


def test_full_table_evicts_the_least_recently_active():
    table = SessionTable(3)
    a, b, c, d = (session(("10.0.0.1", p)) for p in (1, 2, 3, 4))
    for i, s in enumerate((a, b, c)):
        table.add(s, now=float(i))
    table.touch(a, now=5.0)  # a is now the most recent: b is the oldest idle
    assert table.add(d, now=6.0) is b
    assert len(table) == 3
    assert table.get(b.client) is None
    assert {s.client[1] for s in table} == {1, 3, 4}
    # stamps within one tick: the one stamped first goes first
    e = session(("10.0.0.1", 5))
    table.touch(c, now=6.0)
    assert table.add(e, now=6.0) is a  # a (5.0) is older than c and d (6.0)
    assert table.add(session(("10.0.0.1", 6)), now=6.0) is d  # stamped 6.0 before c was


def test_expire_uses_each_session_timeout():
    table = SessionTable(10)
    short = session(("a", 1), timeout=1.0)
    long = session(("a", 2), timeout=10.0)
    table.add(short, now=0.0)
    table.add(long, now=0.0)
    assert table.expire(now=0.5, shortest=1.0) == []
    assert table.expire(now=1.0, shortest=1.0) == [short]
    assert table.expire(now=9.9, shortest=1.0) == []
    assert table.expire(now=10.0, shortest=1.0) == [long]
    assert len(table) == 0


def test_expire_waits_out_the_slack():
    """A stamp may lag its datagram by ``slack``: no session ends before its timeout."""
    table = SessionTable(10)
    s = session(("a", 1), timeout=1.0)
    table.add(s, now=0.0)
    assert table.expire(now=1.4, shortest=1.0, slack=0.5) == []
    assert table.expire(now=1.5, shortest=1.0, slack=0.5) == [s]


def test_expire_pops_only_what_is_old_enough():
    """Entries younger than the shortest timeout are not visited; a longer timeout is
    kept for a later sweep; a stamp refreshed since its entry goes back in."""
    table = SessionTable(10)
    long = session(("a", 1), timeout=10.0)
    busy = session(("a", 2), timeout=1.0)
    young = session(("a", 3), timeout=1.0)
    table.add(long, now=0.0)
    table.add(busy, now=0.0)
    table.add(young, now=4.5)
    table.touch(busy, now=4.2)
    young.last = -100.0  # not a stamp the data plane writes: shows the entry is not reached
    assert table.expire(now=5.0, shortest=1.0) == []
    assert len(table) == 3
    young.last = 4.5
    assert table.expire(now=5.5, shortest=1.0) == [busy, young]
    assert table.expire(now=9.9, shortest=1.0) == []
    assert table.expire(now=10.0, shortest=1.0) == [long]


def test_touch_keeps_a_session_alive():
    table = SessionTable(10)
    s = session(("a", 1), timeout=1.0)
    table.add(s, now=0.0)
    for t in (0.9, 1.8, 2.7):
        assert table.expire(now=t, shortest=1.0) == []
        table.touch(s, now=t)
    assert table.expire(now=3.7, shortest=1.0) == [s]


def test_remove_is_once():
    table = SessionTable(2)
    s = session(("a", 1))
    table.add(s, now=0.0)
    assert table.remove(s) is True
    assert table.remove(s) is False
    # a newer session for the same client is not removed through the old one
    t = session(("a", 1))
    table.add(t, now=1.0)
    assert table.remove(s) is False and table.get(("a", 1)) is t


def test_clear_returns_everything():
    table = SessionTable(5)
    for p in range(4):
        table.add(session(("a", p)), now=0.0)
    assert len(table.clear()) == 4 and len(table) == 0


def test_max_sessions_must_be_positive():
    with pytest.raises(ValueError):
        SessionTable(0)


ops = st.lists(
    st.tuples(st.sampled_from(["add", "touch", "expire"]), st.integers(0, 7), st.integers(1, 3)),
    max_size=80,
)


@settings(max_examples=200, deadline=None)
@given(ops, st.integers(1, 5))
def test_table_matches_a_model(operations, bound):
    """Against a dict of last-activity times: same members, same expiries, and each
    eviction takes a least recently active session (the first touched among equals)."""
    table = SessionTable(bound)
    model: dict[int, tuple[float, float, int]] = {}  # client -> (last, timeout, touch number)
    now = 0.0
    for number, (op, client, step) in enumerate(operations):
        now += step if op != "touch" or step > 1 else 0  # equal stamps happen: one tick
        if op == "add" and client not in model:
            evicted = table.add(session(client, timeout=float(step + 1)), now)
            if len(model) >= bound:
                oldest = min(model, key=lambda c: (model[c][0], model[c][2]))
                assert evicted is not None and evicted.client == oldest
                del model[oldest]
            else:
                assert evicted is None
            model[client] = (now, float(step + 1), number)
        elif op == "touch" and client in model:
            if table.get(client).last != now:  # a second datagram in one tick changes nothing
                table.touch(table.get(client), now)
                model[client] = (now, model[client][1], number)
        elif op == "expire":
            gone = {s.client for s in table.expire(now, shortest=1.0)}
            want = {c for c, (last, timeout, _) in model.items() if now - last >= timeout}
            assert gone == want
            for c in want:
                del model[c]
        assert len(table) == len(model) <= bound
        assert {s.client for s in table} == set(model)


def test_counters_add_and_dict():
    a, b = Counters("r", "s"), Counters("r", "s")
    a.datagrams_to_server, b.datagrams_to_server, b.sessions_evicted = 2, 3, 1
    a.add(b)
    d = a.as_dict()
    assert d["datagrams_to_server"] == 5 and d["sessions_evicted"] == 1
    assert "router" not in d
