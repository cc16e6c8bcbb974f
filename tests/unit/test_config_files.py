"""Configuration files a Traefik user brings: one bad file in a directory costs only its own
routes, and a YAML syntax error is reported where the parser saw it."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest

from edge.config.loader import load_dynamic
from edge.errors import ConfigError
from edge.providers.file import FileProvider, load_file_provider, read_directory
from tests.unit.test_file_provider import Sink, routers, routers_yaml, run, running, until, write


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
    write(tmp_path / "b.yml", "http: {routers: {b: {rule: 'Host(`b`)', sevice: s}}}\n")

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
    assert f"{tmp_path / 'b.yml'}: $.http.routers.b.sevice: unknown key (left out)" in caplog.text
    assert "(its last good version is kept)" in caplog.text


def test_yaml_errors_say_where_the_parser_was(tmp_path: Path) -> None:
    path = tmp_path / "dynamic.yaml"
    # Six lines; the quote opened on line 3 never closes.
    path.write_text(
        'http:\n  routers:\n    a: {rule: "Host(`a`), service: s}\n'
        "  services:\n    s:\n      loadBalancer: {servers: []}\n"
    )
    with pytest.raises(ConfigError) as info:
        load_dynamic(path)
    assert info.value.message == (
        "invalid YAML at line 3, column 15 (while scanning a quoted scalar): "
        "found unexpected end of stream (at the end of the file)"
    )
    path.write_text("a: 1\nb: [1, 2\nc: 3\n")
    with pytest.raises(ConfigError) as info:
        load_dynamic(path)
    assert info.value.message.startswith("invalid YAML at line 2, column 4 (while parsing a flow")
    assert info.value.message.endswith("(at line 3, column 2)")
    path.write_text("a: b: c\n")
    with pytest.raises(ConfigError) as info:
        load_dynamic(path)
    assert (
        info.value.message
        == "invalid YAML at line 1, column 5: mapping values are not allowed in this context"
    )
