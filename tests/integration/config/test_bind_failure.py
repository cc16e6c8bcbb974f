"""A port edge cannot bind stops the start with a message naming the entrypoint and address."""

from __future__ import annotations

import socket
import subprocess
import sys

import pytest
import yaml


@pytest.mark.parametrize("kind", [socket.SOCK_STREAM, socket.SOCK_DGRAM])
def test_bind_failure_names_the_entrypoint(tmp_path, kind):
    with socket.socket(socket.AF_INET, kind) as taken:
        taken.bind(("127.0.0.1", 0))
        port = taken.getsockname()[1]
        suffix = "/udp" if kind == socket.SOCK_DGRAM else ""
        static = {
            "entryPoints": {
                "other": {"address": "127.0.0.1:0"},
                "busy": {"address": f"127.0.0.1:{port}{suffix}"},
            }
        }
        (tmp_path / "edge.yaml").write_text(yaml.safe_dump(static))
        out = subprocess.run(
            [sys.executable, "-m", "edge", "run", "--config", str(tmp_path / "edge.yaml")],
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert out.returncode == 1
    assert "cannot start:" in out.stderr and "entrypoint busy:" in out.stderr, out.stderr
    assert str(port) in out.stderr and "in use" in out.stderr, out.stderr
