"""The file provider: one file, a directory, watching, invalid files, reload."""

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
from edge.providers.file import FileProvider, load_file_provider

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
    path = tmp_path / "dynamic.yml"
    write(path, routers_yaml("a"))

    async def main() -> None:
        sink = Sink()
        provider = FileProvider(filename=str(path), watch=True, poll_interval=0.02)
        async with running(provider, sink):
            await until(lambda: len(sink.messages) == 1)
            write(path, "http:\n  routers:\n    a:\n      rule: Host(`a`)\n      sevice: app\n")
            await until(lambda: "sevice" in caplog.text)
            await asyncio.sleep(0.1)
            assert len(sink.messages) == 1  # nothing published
            write(path, routers_yaml("a", "b"))
            await until(lambda: len(sink.messages) == 2)
            assert routers(sink.messages[-1]) == ["a", "b"]

    with caplog.at_level(logging.ERROR, logger="edge.providers.file"):
        run(main())
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1  # logged once for that version of the file
    assert f"{path}: $.http.routers.a.sevice: unknown key" in errors[0]


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
