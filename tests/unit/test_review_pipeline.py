"""Review of the configuration pipeline (file provider, watcher, API): each test pins a
defect found by the review and fails on the commit before its fix."""

from __future__ import annotations

import logging
import sys
from pathlib import Path

import pytest

from edge.config.loader import decode_static
from edge.errors import ConfigError
from edge.providers.file import read_directory


def routers_yaml(routers: dict[str, str], services: tuple[str, ...] = ()) -> str:
    lines = ["http:", "  routers:"]
    for name, host in routers.items():
        lines += [f"    {name}:", f"      rule: Host(`{host}`)", "      service: app"]
    if services:
        lines.append("  services:")
        for name in services:
            lines += [
                f"    {name}:",
                "      loadBalancer:",
                "        servers:",
                "        - url: http://127.0.0.1:1",
            ]
    return "\n".join(lines) + "\n"


def test_a_name_repeated_in_a_later_file_leaves_out_that_element_only(tmp_path: Path) -> None:
    """Traefik's file provider keeps the first definition of a name (files in sorted
    order) and skips the repeat with a warning; the rest of the later file is served.
    Edge left the whole later file out: one repeated router name (a router being moved
    between files, a copy-paste) took down every route that file defines."""
    (tmp_path / "a.yaml").write_text(routers_yaml({"shared": "a.test"}, services=("app",)))
    (tmp_path / "b.yaml").write_text(
        routers_yaml({"shared": "b.test", "other": "other.test"}, services=("extra",))
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


def test_the_file_provider_watches_unless_told_not_to() -> None:
    """Traefik's providers.file.watch defaults to true (file.Provider.SetDefaults), and its
    documentation's examples leave it out; edge defaulted to false, so a Traefik static
    configuration never picked up a change to its dynamic files."""
    static = decode_static({"providers": {"file": {"directory": "/etc/edge/dynamic"}}})
    assert static.providers.file is not None and static.providers.file.watch is True
    static = decode_static({"providers": {"file": {"filename": "d.yaml", "watch": False}}})
    assert static.providers.file is not None and static.providers.file.watch is False


def test_sigusr1_reopens_the_log_file_where_it_was(tmp_path: Path) -> None:
    """log.filePath is opened again by path (Traefik's SIGUSR1 for logrotate): lines after
    the rotation go to a new file at the path, not to the one moved away."""
    from edge.config.static import Log
    from edge.logs import reopen_logs, setup_logging

    root = logging.getLogger()
    saved, level, hook = list(root.handlers), root.level, sys.unraisablehook
    path = tmp_path / "edge.log"
    try:
        setup_logging(Log(level="INFO", file_path=str(path)))
        logging.getLogger("edge.test").info("before the rotation")
        path.rename(tmp_path / "edge.log.1")
        reopen_logs()
        logging.getLogger("edge.test").info("after the rotation")
    finally:
        for handler in list(root.handlers):
            root.removeHandler(handler)
            handler.close()
        for handler in saved:
            root.addHandler(handler)
        root.setLevel(level)
        sys.unraisablehook = hook
    assert "after the rotation" in path.read_text()
    assert "after the rotation" not in (tmp_path / "edge.log.1").read_text()


def test_a_key_written_twice_in_a_yaml_mapping_is_an_error(tmp_path: Path) -> None:
    """Traefik's YAML decoder (go-yaml v3) refuses a mapping key written twice; PyYAML
    keeps the last value in silence, so a router block pasted under a name already used
    replaced the first one (a.test answered 404) and edge check said the file was valid."""
    from edge.config.loader import load_dynamic

    path = tmp_path / "dynamic.yaml"
    path.write_text(
        routers_yaml({"one": "a.test", "two": "c.test"})
        + "    one:\n      rule: Host(`b.test`)\n      service: app\n"
    )
    with pytest.raises(ConfigError) as info:
        load_dynamic(path)
    message = str(info.value)
    assert "key 'one' is defined again" in message
    assert "at line 3," in message and "at line 9," in message  # the first, then the repeat
    # A key a << merge brings in may still be overridden, as YAML allows.
    path.write_text(
        "http:\n  routers:\n    one: &one {rule: Host(`a.test`), service: app}\n"
        "    two:\n      <<: *one\n      rule: Host(`b.test`)\n"
    )
    conf = load_dynamic(path)
    assert conf.http is not None and conf.http.routers["two"].rule == "Host(`b.test`)"
    assert conf.http.routers["two"].service == "app"


def test_the_file_provider_decodes_off_the_event_loop(tmp_path: Path) -> None:
    """A watched file is read and decoded in a thread: the loop keeps running (serving)
    while a large configuration is parsed. Before, the parse ran inside a loop callback:
    10,000 routers stalled every connection for 0.7 s at each change, and the loop ran
    nothing at all while this file (3,000 routers) was read."""
    import asyncio

    from edge.providers.file import FileProvider

    routers = {f"r{i}": f"h{i}.test" for i in range(3000)}
    (tmp_path / "dynamic.yaml").write_text(routers_yaml(routers, services=("app",)))
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

    (tmp_path / "a.yaml").write_text(routers_yaml({"a": "a.test"}, services=("app",)))
    (tmp_path / name).write_text(text)
    with pytest.raises(ConfigError, match="cannot be decoded"):
        load_dynamic(tmp_path / name)
    published: list[object] = []
    with caplog.at_level(logging.ERROR, logger="edge.providers.file"):
        provider = FileProvider(directory=str(tmp_path))
        asyncio.run(asyncio.wait_for(provider.run(published.append), 30))
    assert len(published) == 1  # a.yaml is served
    assert f"{tmp_path / name}: cannot be decoded" in caplog.text
