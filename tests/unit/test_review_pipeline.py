"""Review of the configuration pipeline (file provider, watcher, API): each test pins a
defect found by the review and fails on the commit before its fix."""

from __future__ import annotations

import logging
import sys
from pathlib import Path

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
