"""The edge command as a user types it."""

from __future__ import annotations

import subprocess
import sys

import yaml

from edge import __version__


def edge(*args: str, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "edge", *args], capture_output=True, text=True, timeout=30, cwd=cwd
    )


def test_version():
    out = edge("--version")
    assert out.returncode == 0 and out.stdout.strip() == f"edge {__version__}"


def write(tmp_path, static: dict, dynamic: dict | str) -> str:
    (tmp_path / "dynamic.yaml").write_text(
        dynamic if isinstance(dynamic, str) else yaml.safe_dump(dynamic)
    )
    static = {"providers": {"file": {"filename": "dynamic.yaml"}}, **static}
    (tmp_path / "static.yaml").write_text(yaml.safe_dump(static))
    return str(tmp_path / "static.yaml")


GOOD = {
    "http": {
        "routers": {"a": {"rule": "Host(`a`)", "service": "s"}},
        "services": {"s": {"loadBalancer": {"servers": [{"url": "http://127.0.0.1:9"}]}}},
    }
}


def test_check_valid_configuration(tmp_path):
    out = edge(
        "check", "--config", write(tmp_path, {"entryPoints": {"web": {"address": ":80"}}}, GOOD)
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "router a@file: enabled" in out.stdout
    assert "configuration is valid" in out.stdout


def test_check_reports_each_broken_router_and_exits_nonzero(tmp_path):
    dyn = yaml.safe_load(yaml.safe_dump(GOOD))
    dyn["http"]["routers"]["bad-rule"] = {"rule": "Host(`a`) && Hots(`x`)", "service": "s"}
    dyn["http"]["routers"]["no-svc"] = {"rule": "Host(`b`)", "service": "nope"}
    dyn["http"]["routers"]["no-ep"] = {
        "rule": "Host(`c`)",
        "service": "s",
        "entryPoints": ["websecure"],
    }
    out = edge(
        "check", "--config", write(tmp_path, {"entryPoints": {"web": {"address": ":80"}}}, dyn)
    )
    assert out.returncode == 1
    lines = out.stdout.splitlines()
    assert "router a@file: enabled" in lines
    assert any(
        line.startswith("router bad-rule@file: disabled") and "column 14" in line for line in lines
    ), out.stdout
    assert any(
        line.startswith("router no-svc@file: disabled") and "nope@file" in line for line in lines
    ), out.stdout
    assert any(
        line.startswith("router no-ep@file: disabled") and "websecure" in line for line in lines
    ), out.stdout
    assert "configuration is invalid" in out.stdout


def test_static_unknown_key_names_its_path(tmp_path):
    out = edge(
        "check", "--config", write(tmp_path, {"entryPoints": {"web": {"adress": ":80"}}}, GOOD)
    )
    assert out.returncode == 1
    assert "$.entryPoints.web.adress" in out.stdout + out.stderr


def test_static_wrong_type_names_its_path(tmp_path):
    out = edge(
        "check",
        "--config",
        write(
            tmp_path,
            {"entryPoints": {"web": {"address": ":80", "http": {"maxHeaderBytes": "lots"}}}},
            GOOD,
        ),
    )
    assert out.returncode == 1
    assert "$.entryPoints.web.http.maxHeaderBytes" in out.stdout + out.stderr


def test_dynamic_file_error_names_file_and_path(tmp_path):
    out = edge(
        "check",
        "--config",
        write(
            tmp_path,
            {"entryPoints": {"web": {"address": ":80"}}},
            "http:\n  routers:\n    a: {rule: 'Host(`a`)', servce: s}\n",
        ),
    )
    assert out.returncode == 1
    assert "dynamic.yaml" in out.stdout and "$.http.routers.a.servce" in out.stdout


def test_run_refuses_a_busy_port(tmp_path):
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        out = edge(
            "run",
            "--config",
            write(tmp_path, {"entryPoints": {"web": {"address": f"127.0.0.1:{port}"}}}, GOOD),
        )
    assert out.returncode == 1
    assert "cannot start" in out.stderr and str(port) in out.stderr
