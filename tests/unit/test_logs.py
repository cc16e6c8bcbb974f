"""Logging (edge.logs): the log file reopened by path on SIGUSR1, as logrotate needs."""

import logging
import sys
from pathlib import Path


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
