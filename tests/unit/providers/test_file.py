"""The file provider (edge.providers.file): one file, a directory, watching, invalid files,
reload. A bad file in a directory costs only its own routes; a name repeated in a later
file costs only that element; decoding runs off the event loop."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from edge.errors import ConfigError
from edge.providers.base import Message, Provider
from edge.providers.file import FileProvider, load_file_provider, read_directory
from tests.unit.config.documents import hosts_yaml

TIMEOUT = 5.0


def run(coro: Awaitable[Any]) -> Any:
    async def bounded() -> Any:
        return await asyncio.wait_for(coro, TIMEOUT)

    return asyncio.run(bounded())


async def until(predicate: Callable[[], bool], timeout: float = 2.0) -> float:
    """Wait for ``predicate``; returns the seconds it took."""
    loop = asyncio.get_running_loop()
    start = loop.time()
    while not predicate():
        if loop.time() - start > timeout:
            raise AssertionError("condition not met in time")
        await asyncio.sleep(0.01)
    return loop.time() - start


def routers_yaml(*names: str, service: str = "app") -> str:
    lines = ["http:", "  routers:"]
    for name in names:
        lines += [
            f"    {name}:",
            f"      rule: Host(`{name}.example`)",
            f"      service: {service}",
        ]
    return "\n".join(lines) + "\n"


def write(path: Path, text: str) -> None:
    path.write_text(text)


def routers(msg: Message) -> list[str]:
    http = msg.configuration.http
    return sorted(http.routers) if http is not None else []


class Sink:
    def __init__(self) -> None:
        self.messages: list[Message] = []

    def __call__(self, msg: Message) -> None:
        self.messages.append(msg)


@contextlib.asynccontextmanager
async def running(provider: FileProvider, sink: Sink):
    task = asyncio.get_running_loop().create_task(provider.run(sink))
    try:
        yield task
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


def test_satisfies_the_provider_protocol() -> None:
    assert isinstance(FileProvider(filename="x.yml"), Provider)
    with pytest.raises(ValueError):
        FileProvider()
    with pytest.raises(ValueError):
        FileProvider(filename="a", directory="b")


def test_single_file(tmp_path: Path) -> None:
    path = tmp_path / "dynamic.yml"
    write(path, routers_yaml("a", "b"))
    sink = Sink()
    run(FileProvider(filename=str(path)).run(sink))  # without watch: publishes and returns
    assert len(sink.messages) == 1
    assert sink.messages[0].provider == "file"
    assert routers(sink.messages[0]) == ["a", "b"]


def test_directory_merges_every_file(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    (tmp_path / ".hidden").mkdir()
    write(tmp_path / "a.yml", routers_yaml("a"))
    write(
        tmp_path / "b.yaml",
        "http:\n  services:\n    app:\n      loadBalancer:\n        servers: [{url: 'http://x'}]\n",
    )
    write(tmp_path / "sub" / "c.toml", '[http.routers.c]\nrule = "Host(`c`)"\nservice = "app"\n')
    write(tmp_path / "d.json", '{"tls": {"options": {"modern": {"minVersion": "VersionTLS13"}}}}')
    write(tmp_path / "notes.txt", "not configuration")
    write(tmp_path / ".hidden" / "x.yml", "garbage: [")
    sink = Sink()
    run(FileProvider(directory=str(tmp_path), name="files").run(sink))
    (msg,) = sink.messages
    assert msg.provider == "files"
    conf = msg.configuration
    assert conf.http is not None and sorted(conf.http.routers) == ["a", "c"]
    assert list(conf.http.services) == ["app"]
    assert conf.tls is not None and list(conf.tls.options) == ["modern"]


def test_directory_duplicate_names_are_an_error_naming_both_files(tmp_path: Path) -> None:
    write(tmp_path / "one.yml", routers_yaml("same"))
    write(tmp_path / "two.yml", routers_yaml("same"))
    with pytest.raises(ConfigError) as info:
        load_file_provider(directory=str(tmp_path))
    message = str(info.value)
    assert "http.routers 'same'" in message
    assert str(tmp_path / "one.yml") in message and str(tmp_path / "two.yml") in message


def test_invalid_file_keeps_last_good_and_logs_the_path(tmp_path: Path, caplog) -> None:
    """A file that does not decode at all (here a key error outside any element) keeps
    its last good version."""
    path = tmp_path / "dynamic.yml"
    write(path, routers_yaml("a"))

    async def main() -> None:
        sink = Sink()
        provider = FileProvider(filename=str(path), watch=True, poll_interval=0.02)
        async with running(provider, sink):
            await until(lambda: len(sink.messages) == 1)
            write(path, "http:\n  routerz:\n    a:\n      rule: Host(`a`)\n      service: app\n")
            await until(lambda: "routerz" in caplog.text)
            await asyncio.sleep(0.1)
            assert len(sink.messages) == 1  # nothing published
            write(path, routers_yaml("a", "b"))
            await until(lambda: len(sink.messages) == 2)
            assert routers(sink.messages[-1]) == ["a", "b"]

    with caplog.at_level(logging.ERROR, logger="edge.providers.file"):
        run(main())
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1  # logged once for that version of the file
    assert f"{path}: $.http.routerz: unknown key" in errors[0]
    assert "keeping the last good configuration" in errors[0]


def test_a_key_error_in_one_element_costs_only_that_element(tmp_path: Path, caplog) -> None:
    """At the first read and on reload: the router with a misspelt key stands in
    disabled, with its key path, and the file's other routers are published (before,
    the whole file was refused, and at start nothing was served)."""
    path = tmp_path / "dynamic.yml"
    bad = "    bad:\n      rule: Host(`bad`)\n      sevice: app\n"
    write(path, routers_yaml("a") + bad)

    async def main() -> None:
        sink = Sink()
        provider = FileProvider(filename=str(path), watch=True, poll_interval=0.02)
        async with running(provider, sink):
            await until(lambda: len(sink.messages) == 1)
            first = sink.messages[0].configuration.http
            assert first is not None and first.routers["a"].problems == []
            assert first.routers["bad"].problems == ["$.http.routers.bad.sevice: unknown key"]
            write(path, routers_yaml("a", "b") + bad.replace("bad", "worse"))
            await until(lambda: len(sink.messages) == 2)
            assert routers(sink.messages[-1]) == ["a", "b", "worse"]
            last = sink.messages[-1].configuration.http
            assert last is not None and last.routers["worse"].problems != []

    with caplog.at_level(logging.ERROR, logger="edge.providers.file"):
        run(main())
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert errors == [
        f"file provider file: {path}: $.http.routers.bad.sevice: unknown key (disabled)",
        f"file provider file: {path}: $.http.routers.worse.sevice: unknown key (disabled)",
    ]


def test_a_key_error_in_a_directory_file_costs_only_that_element(tmp_path: Path) -> None:
    write(tmp_path / "a.yml", routers_yaml("a"))
    write(tmp_path / "b.yml", routers_yaml("b") + "    c:\n      rule: Host(`c`)\n")
    errors: list[ConfigError] = []
    conf = load_file_provider(directory=str(tmp_path), errors=errors)
    assert conf.http is not None and sorted(conf.http.routers) == ["a", "b", "c"]
    assert conf.http.routers["c"].problems == ["$.http.routers.c.service: missing required key"]
    assert [str(e) for e in errors] == [
        f"{tmp_path / 'b.yml'}: $.http.routers.c.service: missing required key (disabled)"
    ]
    # A file that does not decode at all is left out whole, with no element's error.
    write(tmp_path / "b.yml", routers_yaml("b") + "    c:\n      rule: Host(`c`)\n" + "tcp: []\n")
    errors = []
    conf = load_file_provider(directory=str(tmp_path), errors=errors)
    assert conf.http is not None and sorted(conf.http.routers) == ["a"]
    assert [e.path for e in errors] == ["$.tcp"]


def test_watch_picks_up_a_rewrite_within_a_second(tmp_path: Path) -> None:
    path = tmp_path / "dynamic.yml"
    write(path, routers_yaml("a"))

    async def main() -> None:
        sink = Sink()
        async with running(FileProvider(filename=str(path), watch=True), sink):
            await until(lambda: len(sink.messages) == 1)
            await asyncio.sleep(0.3)
            write(path, routers_yaml("a", "b"))
            took = await until(lambda: len(sink.messages) == 2, timeout=1.0)
            assert took < 1.0
            assert routers(sink.messages[-1]) == ["a", "b"]
            # Replaced by rename (how editors and ConfigMaps write): picked up too.
            tmp = tmp_path / "dynamic.yml.tmp"
            write(tmp, routers_yaml("c"))
            os.replace(tmp, path)
            await until(lambda: len(sink.messages) == 3, timeout=1.0)
            assert routers(sink.messages[-1]) == ["c"]
            # Touching without changing the content publishes nothing.
            os.utime(path, None)
            await asyncio.sleep(0.7)
            assert len(sink.messages) == 3

    run(main())


def test_watch_directory_sees_new_and_removed_files(tmp_path: Path) -> None:
    write(tmp_path / "a.yml", routers_yaml("a"))

    async def main() -> None:
        sink = Sink()
        provider = FileProvider(directory=str(tmp_path), watch=True, poll_interval=0.05)
        async with running(provider, sink):
            await until(lambda: len(sink.messages) == 1)
            write(tmp_path / "b.yml", routers_yaml("b"))
            await until(lambda: len(sink.messages) == 2)
            assert routers(sink.messages[-1]) == ["a", "b"]
            (tmp_path / "a.yml").unlink()
            await until(lambda: len(sink.messages) == 3)
            assert routers(sink.messages[-1]) == ["b"]

    run(main())


def test_partial_rewrite_never_publishes_a_bad_configuration(tmp_path: Path) -> None:
    path = tmp_path / "dynamic.yml"
    full = routers_yaml("a", "b", "c")
    write(path, full)

    async def main() -> None:
        sink = Sink()
        provider = FileProvider(filename=str(path), watch=True, poll_interval=0.02)
        async with running(provider, sink):
            await until(lambda: len(sink.messages) == 1)
            new = routers_yaml("a", "b", "c", "d")
            with open(path, "w") as f:  # truncate, then write in pieces, slowly
                for i in range(0, len(new), 7):
                    f.write(new[i : i + 7])
                    f.flush()
                    await asyncio.sleep(0.005)
            await until(lambda: routers(sink.messages[-1]) == ["a", "b", "c", "d"])
            for msg in sink.messages:
                assert routers(msg) in (["a", "b", "c"], ["a", "b", "c", "d"])

    run(main())


def test_reload_rereads_now(tmp_path: Path) -> None:
    path = tmp_path / "dynamic.yml"
    write(path, routers_yaml("a"))

    async def main() -> None:
        sink = Sink()
        provider = FileProvider(filename=str(path))  # no watch
        await provider.run(sink)
        write(path, routers_yaml("b"))
        provider.reload()
        assert routers(sink.messages[-1]) == ["b"]
        provider.reload()  # unchanged: nothing new
        assert len(sink.messages) == 2

    run(main())


def test_missing_file_publishes_nothing(tmp_path: Path, caplog) -> None:
    sink = Sink()
    with caplog.at_level(logging.ERROR, logger="edge.providers.file"):
        run(FileProvider(filename=str(tmp_path / "nope.yml")).run(sink))
    assert sink.messages == []
    assert "nope.yml: cannot read file" in caplog.text


def test_poll_waits_for_a_change_to_settle(tmp_path: Path) -> None:
    path = tmp_path / "dynamic.yml"
    write(path, routers_yaml("a"))
    sink = Sink()
    provider = FileProvider(filename=str(path), poll_interval=0.5)
    run(provider.run(sink))  # publishes once; poll() is then driven by hand
    assert len(sink.messages) == 1
    write(path, routers_yaml("b"))
    provider.poll()  # just written: not settled yet
    assert len(sink.messages) == 1
    provider.poll()  # same stat as the previous poll: settled
    assert routers(sink.messages[-1]) == ["b"]


def test_duplicate_names_use_traefik_key_names(tmp_path: Path) -> None:
    write(tmp_path / "one.yml", "http:\n  serversTransports:\n    t: {}\n")
    write(tmp_path / "two.yml", "http:\n  serversTransports:\n    t: {}\n")
    with pytest.raises(ConfigError, match=r"http\.serversTransports 't' is defined in both"):
        load_file_provider(directory=str(tmp_path))


def test_empty_directory_is_an_empty_configuration(tmp_path: Path) -> None:
    conf = load_file_provider(directory=str(tmp_path))
    assert conf.is_empty()


def test_a_bad_file_in_a_directory_is_left_out_and_the_rest_served(tmp_path: Path) -> None:
    write(tmp_path / "a.yml", routers_yaml("a"))
    write(tmp_path / "b.yml", 'http:\n  routers:\n    b: {rule: "Host(`b`), service: s}\n')
    write(tmp_path / "c.yml", routers_yaml("a", "c"))  # repeats a.yml's router: that one left out
    write(tmp_path / "d.yml", routers_yaml("d"))
    errors: list[ConfigError] = []
    conf = load_file_provider(directory=str(tmp_path), errors=errors)
    assert conf.http is not None and sorted(conf.http.routers) == ["a", "c", "d"]
    assert [(e.source, e.message.endswith("left out)")) for e in errors] == [
        (str(tmp_path / "b.yml"), True),
        (str(tmp_path / "c.yml"), True),
    ]
    assert "invalid YAML at line 3" in errors[0].message
    assert (
        f"'a' is defined in both {tmp_path / 'a.yml'} and {tmp_path / 'c.yml'}" in errors[1].message
    )
    # Without a list for the errors, the first one raises (as a single file does).
    with pytest.raises(ConfigError, match="invalid YAML"):
        load_file_provider(directory=str(tmp_path))


def test_a_file_that_breaks_keeps_its_last_good_version(tmp_path: Path) -> None:
    write(tmp_path / "a.yml", routers_yaml("a"))
    write(tmp_path / "b.yml", routers_yaml("b"))
    _, files = read_directory(str(tmp_path), [])
    write(tmp_path / "b.yml", routers_yaml("b", "b2") + "  oops: [\n")
    errors: list[ConfigError] = []
    conf, used = read_directory(str(tmp_path), errors, previous=files)
    assert conf.http is not None and sorted(conf.http.routers) == ["a", "b"]
    assert used[str(tmp_path / "b.yml")] == files[str(tmp_path / "b.yml")]
    assert errors[0].message.endswith("(its last good version is kept)")


def test_the_provider_serves_the_good_files_and_logs_the_bad_one(tmp_path: Path, caplog) -> None:
    write(tmp_path / "a.yml", routers_yaml("a"))
    write(tmp_path / "b.yml", "http: {routerz: {b: {rule: 'Host(`b`)', service: s}}}\n")

    async def main() -> None:
        sink = Sink()
        provider = FileProvider(directory=str(tmp_path), watch=True, poll_interval=0.02)
        async with running(provider, sink):
            await until(lambda: len(sink.messages) == 1)
            assert routers(sink.messages[-1]) == ["a"]  # b.yml left out, a.yml served
            write(tmp_path / "b.yml", routers_yaml("b"))
            await until(lambda: len(sink.messages) == 2)
            assert routers(sink.messages[-1]) == ["a", "b"]
            write(tmp_path / "b.yml", routers_yaml("b", "c") + "bad: [\n")
            write(tmp_path / "c.yml", routers_yaml("c"))
            await until(lambda: len(sink.messages) == 3)
            assert routers(sink.messages[-1]) == ["a", "b", "c"]  # b.yml: its last good part
            await asyncio.sleep(0.1)
            assert len(sink.messages) == 3

    with caplog.at_level(logging.ERROR, logger="edge.providers.file"):
        run(main())
    assert f"{tmp_path / 'b.yml'}: $.http.routerz: unknown key (left out)" in caplog.text
    assert "(its last good version is kept)" in caplog.text


def test_a_name_repeated_in_a_later_file_leaves_out_that_element_only(tmp_path: Path) -> None:
    """Traefik's file provider keeps the first definition of a name (files in sorted
    order) and skips the repeat with a warning; the rest of the later file is served.
    Edge left the whole later file out: one repeated router name (a router being moved
    between files, a copy-paste) took down every route that file defines."""
    (tmp_path / "a.yaml").write_text(hosts_yaml({"shared": "a.test"}, services=("app",)))
    (tmp_path / "b.yaml").write_text(
        hosts_yaml({"shared": "b.test", "other": "other.test"}, services=("extra",))
    )
    errors: list[ConfigError] = []
    conf, used = read_directory(str(tmp_path), errors)
    assert conf.http is not None
    assert sorted(conf.http.routers) == ["other", "shared"]
    assert conf.http.routers["shared"].rule == "Host(`a.test`)"  # the first file's
    assert sorted(conf.http.services) == ["app", "extra"]
    (error,) = errors
    message = str(error)
    assert "http.routers 'shared'" in message
    assert str(tmp_path / "a.yaml") in message and str(tmp_path / "b.yaml") in message
    # what each file contributed: b.yaml without the repeat
    assert sorted(used[str(tmp_path / "b.yaml")].http.routers) == ["other"]


def test_the_file_provider_decodes_off_the_event_loop(tmp_path: Path) -> None:
    """A watched file is read and decoded in a thread: the loop keeps running (serving)
    while a large configuration is parsed. Before, the parse ran inside a loop callback:
    10,000 routers stalled every connection for 0.7 s at each change, and the loop ran
    nothing at all while this file (3,000 routers) was read."""
    import asyncio

    from edge.providers.file import FileProvider

    routers = {f"r{i}": f"h{i}.test" for i in range(3000)}
    (tmp_path / "dynamic.yaml").write_text(hosts_yaml(routers, services=("app",)))
    published: list[object] = []

    async def main() -> int:
        ticks = 0
        stop = False

        async def ticker() -> None:
            nonlocal ticks
            while not stop:
                ticks += 1
                await asyncio.sleep(0)

        task = asyncio.get_running_loop().create_task(ticker())
        await asyncio.sleep(0)
        before = ticks
        await FileProvider(filename=str(tmp_path / "dynamic.yaml")).run(published.append)
        during = ticks - before
        stop = True
        await asyncio.wait_for(task, 5)
        return during

    during = asyncio.run(asyncio.wait_for(main(), 30))
    assert len(published) == 1
    assert during >= 5, f"the loop ran {during} times while the file was read"


@pytest.mark.parametrize(
    ("name", "text"),
    [
        ("deep.json", '{"http": ' + "[" * 100_000 + "]" * 100_000 + "}"),
        ("deep.toml", "http = " + "[" * 3_000 + "]" * 3_000),
        ("digits.yaml", "http:\n  routers:\n    r:\n      priority: " + "9" * 5_000 + "\n"),
    ],
)
def test_content_no_parser_takes_is_one_file_left_out(tmp_path: Path, caplog, name, text) -> None:
    """JSON or TOML nested deeper than the interpreter's stack (RecursionError) or an
    integer of more than 4,300 digits (ValueError) escaped the loader as what the parser
    raised, not ConfigError: the file provider's task ended on it, so in a directory one
    such file stopped every later reload of all the others, and edge check crashed."""
    import asyncio

    from edge.config.loader import load_dynamic
    from edge.providers.file import FileProvider

    (tmp_path / "a.yaml").write_text(hosts_yaml({"a": "a.test"}, services=("app",)))
    (tmp_path / name).write_text(text)
    with pytest.raises(ConfigError, match="cannot be decoded"):
        load_dynamic(tmp_path / name)
    published: list[object] = []
    with caplog.at_level(logging.ERROR, logger="edge.providers.file"):
        provider = FileProvider(directory=str(tmp_path))
        asyncio.run(asyncio.wait_for(provider.run(published.append), 30))
    assert len(published) == 1  # a.yaml is served
    assert f"{tmp_path / name}: cannot be decoded" in caplog.text
