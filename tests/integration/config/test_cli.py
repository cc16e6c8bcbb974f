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


# --- nothing ignored in silence -----------------------------------------------------------


def test_check_of_an_empty_static_file_says_http_on_port_80_is_added(tmp_path):
    (tmp_path / "static.yaml").write_text("")
    out = edge("check", "--config", str(tmp_path / "static.yaml"))
    assert out.returncode == 0, out.stdout + out.stderr
    assert (
        "static configuration: no entry point defined: serving on entry point http, "
        "address :80, as Traefik does (define entryPoints to choose)"
    ) in out.stdout.splitlines()


def test_two_entry_points_on_one_address_fail_check_and_start_naming_both(tmp_path):
    import socket

    with socket.socket() as s:  # a port free now
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    eps = {"web": {"address": f":{port}"}, "admin": {"address": f"127.0.0.1:{port}"}}
    static = write(tmp_path, {"entryPoints": eps}, GOOD)
    checked = edge("check", "--config", static)
    assert checked.returncode == 1
    said = f"entryPoints 'admin' (127.0.0.1:{port}) and 'web' (:{port}) both bind port {port}/tcp"
    assert said in checked.stdout
    run = edge("run", "--config", static)  # refused before anything binds
    assert run.returncode == 1
    assert said in run.stderr and "already in use" not in run.stderr


def test_cert_resolver_edge_lacks_is_a_warning_naming_the_router(tmp_path):
    dyn = yaml.safe_load(yaml.safe_dump(GOOD))
    dyn["http"]["routers"]["a"]["tls"] = {"certResolver": "le"}
    out = edge(
        "check", "--config", write(tmp_path, {"entryPoints": {"web": {"address": ":80"}}}, dyn)
    )
    assert out.returncode == 0, out.stdout  # served, with what edge has
    assert (
        "router a@file: warning: tls.certResolver 'le' does not exist (edge has no certificate "
        "resolvers, no ACME): served with tls.certificates, else the default certificate"
    ) in out.stdout.splitlines()


def test_access_log_filters_and_fields_are_read(tmp_path):
    """accessLog's filters, fields and addInternals are implemented: no notice names
    them; a bad status range is an error naming its key."""
    static = {
        "entryPoints": {"web": {"address": ":80"}},
        "accessLog": {
            "filters": {"statusCodes": ["500"]},
            "fields": {"defaultMode": "keep"},
            "addInternals": True,
        },
    }
    out = edge("check", "--config", write(tmp_path, static, GOOD))
    assert out.returncode == 0, out.stdout
    assert "$.accessLog" not in out.stdout, out.stdout
    static["accessLog"]["filters"] = {"statusCodes": ["5xx"]}
    out = edge("check", "--config", write(tmp_path, static, GOOD))
    assert out.returncode != 0
    assert "$.accessLog.filters: statusCodes[0]: '5xx'" in out.stdout + out.stderr


def test_relative_certificate_paths_are_read_from_the_working_directory(tmp_path):
    """As Traefik (Go) opens them; ``edge check`` says which file each is, wherever it
    runs, so two runs from two folders give two answers that say why."""
    from tests.fixtures.tls.pki import PKI

    PKI().issue("a.test").write(tmp_path, "a")  # a.crt, a.key in the static file's folder
    dyn = yaml.safe_load(yaml.safe_dump(GOOD))
    dyn["http"]["routers"]["a"]["tls"] = {}
    dyn["tls"] = {"certificates": [{"certFile": "a.crt", "keyFile": "a.key"}]}
    static = write(tmp_path, {"entryPoints": {"web": {"address": ":80"}}}, dyn)
    here = edge("check", "--config", static, cwd=tmp_path)
    assert here.returncode == 0, here.stdout
    said = "dynamic configuration: tls.certificates[0].certFile: relative path 'a.crt' is read"
    assert f"{said} from the working directory: {tmp_path / 'a.crt'}" in here.stdout
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    there = edge("check", "--config", static, cwd=elsewhere)
    assert f"{said} from the working directory: {elsewhere / 'a.crt'}" in there.stdout
    assert there.returncode == 1 and "router a@file: disabled" in there.stdout
    # The reason, in the log and the API too, says where the relative path was looked for.
    reason = next(x for x in there.stdout.splitlines() if x.startswith("router a@file:"))
    assert f"(a relative path, read from the working directory: {elsewhere / 'a.crt'})" in reason


def test_relative_users_files_are_read_from_the_working_directory(tmp_path):
    """basicAuth's and digestAuth's ``usersFile`` are opened as certificates are, from
    the working directory; ``edge check`` says which file each is."""
    (tmp_path / "users").write_text("test:{SHA}qUqP5cyxm6YcTAhz05Hph5gvu9M=\n")
    (tmp_path / "digest").write_text("test:traefik:a2688e031edb4be6a3797f3882655c05\n")
    dyn = yaml.safe_load(yaml.safe_dump(GOOD))
    dyn["http"]["routers"]["a"]["middlewares"] = ["basic", "digest"]
    dyn["http"]["middlewares"] = {
        "basic": {"basicAuth": {"usersFile": "users"}},
        "digest": {"digestAuth": {"usersFile": "digest"}},
    }
    static = write(tmp_path, {"entryPoints": {"web": {"address": ":80"}}}, dyn)
    here = edge("check", "--config", static, cwd=tmp_path)
    assert here.returncode == 0, here.stdout
    files = {"basic": ("basicAuth", "users"), "digest": ("digestAuth", "digest")}
    said = {
        f"dynamic configuration: http.middlewares.{name}@file.{kind}.usersFile: relative "
        f"path {path!r} is read from the working directory": path
        for name, (kind, path) in files.items()
    }
    for line, path in said.items():
        assert f"{line}: {tmp_path / path}" in here.stdout, here.stdout
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    there = edge("check", "--config", static, cwd=elsewhere)
    for line, path in said.items():
        assert f"{line}: {elsewhere / path}" in there.stdout, there.stdout
    assert there.returncode == 1 and "router a@file: disabled" in there.stdout
    # The middleware's reason says where the relative path was looked for.
    reason = next(x for x in there.stdout.splitlines() if x.startswith("middleware basic@file:"))
    assert f"(a relative path, read from the working directory: {elsewhere / 'users'})" in reason


def test_static_root_cas_are_relative_to_the_static_file(tmp_path):
    from tests.fixtures.tls.pki import PKI

    PKI().write_ca(tmp_path)
    ca = next(tmp_path.glob("*.crt")).name
    dyn = yaml.safe_load(yaml.safe_dump(GOOD))
    dyn["http"]["services"]["s"] = {"loadBalancer": {"servers": [{"url": "https://127.0.0.1:9"}]}}
    static = {"entryPoints": {"web": {"address": ":80"}}, "serversTransport": {"rootCAs": [ca]}}
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    out = edge("check", "--config", write(tmp_path, static, dyn), cwd=elsewhere)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "service s@file: enabled" in out.stdout
    (tmp_path / ca).unlink()
    out = edge("check", "--config", str(tmp_path / "static.yaml"), cwd=elsewhere)
    assert out.returncode == 1 and str(tmp_path / ca) in out.stdout


# --- edge whoami ------------------------------------------------------------------------


def test_whoami_takes_every_whoami_option(tmp_path):
    """``edge whoami`` is whoami's own argument set: the TLS echo (``--tls`` with
    ``--cert``/``--key``) runs as ``python -m edge.whoami`` runs it, which
    k8s/examples/crd/echo.yaml relies on; before, the command knew no ``--tls``."""
    import hashlib
    import socket
    import ssl

    from tests.fixtures.tls.pki import PKI
    from tests.harness import Proc

    pair = PKI().issue("echo.example.test")
    cert, key = pair.write(tmp_path, "echo")
    echo = Proc(["whoami", "--name", "echo", "--tls", "127.0.0.1:0", "--cert", cert, "--key", key])
    try:
        port = int(echo.wait_for(r"whoami echo: tls on 127\.0\.0\.1:(\d+)", timeout=20).group(1))
        client = ssl.create_default_context()
        client.check_hostname = False
        client.verify_mode = ssl.CERT_NONE
        raw = socket.create_connection(("127.0.0.1", port), timeout=10)
        with client.wrap_socket(raw, server_hostname="echo.example.test") as tls:
            der = tls.getpeercert(binary_form=True)
            assert der is not None and hashlib.sha256(der).hexdigest() == pair.fingerprint
            tls.sendall(b"hello\n")
            got = b""
            while len(got) < 6:
                chunk = tls.recv(6 - len(got))
                assert chunk, got
                got += chunk
            assert got == b"hello\n"
    finally:
        echo.stop()
    out = edge("whoami", "--tls", "127.0.0.1:0")
    assert out.returncode == 1
    assert out.stderr.strip().splitlines()[-1] == "edge: whoami: --tls needs --cert and --key"


def test_check_names_a_bad_servers_transport_and_tls_options_where_they_are_used(tmp_path):
    """A key error in a serversTransport or TLS options: ``edge check`` shows the
    services and routers using it disabled with the key path, and the rest enabled."""
    dyn = yaml.safe_load(yaml.safe_dump(GOOD))
    dyn["http"]["routers"]["via"] = {"rule": "Host(`v`)", "service": "via"}
    dyn["http"]["routers"]["secure"] = {
        "rule": "Host(`t`)",
        "service": "s",
        "tls": {"options": "x"},
    }
    dyn["http"]["services"]["via"] = {
        "loadBalancer": {"servers": [{"url": "http://127.0.0.1:9"}], "serversTransport": "t"}
    }
    dyn["http"]["serversTransports"] = {"t": {"maxIdleConnsPerHost": "many"}}
    dyn["tls"] = {
        "options": {"x": {"minVersion": "VersionTLS13", "clientAuth": {"caFile": "ca.pem"}}}
    }
    out = edge(
        "check", "--config", write(tmp_path, {"entryPoints": {"web": {"address": ":80"}}}, dyn)
    )
    assert out.returncode == 1
    transport = "$.http.serversTransports.t.maxIdleConnsPerHost: expected int, got str"
    options = "$.tls.options.x.clientAuth.caFile: unknown key"
    lines = out.stdout.splitlines()
    assert "router a@file: enabled" in lines, out.stdout
    assert (
        f"service via@file: disabled: serversTransport 't@file' is disabled: {transport}" in lines
    ), out.stdout
    assert any(
        line.startswith("router via@file: disabled: service 'via@file' is disabled")
        for line in lines
    ), out.stdout
    assert f"router secure@file: disabled: TLS options 'x@file' are disabled: {options}" in lines


def test_check_says_which_http_versions_each_entry_point_serves(tmp_path):
    dynamic = {
        "http": {
            "routers": {
                "a": {"rule": "Host(`a`)", "service": "s", "entryPoints": ["websecure"], "tls": {}},
                "b": {"rule": "Host(`b`)", "service": "s", "entryPoints": ["web"]},
            },
            "services": GOOD["http"]["services"],
        },
        "tls": {"options": {"default": {"alpnProtocols": ["http/1.1"]}}},
    }
    static = {"entryPoints": {"web": {"address": ":80"}, "websecure": {"address": ":443"}}}
    out = edge("check", "--config", write(tmp_path, static, dynamic))
    assert out.returncode == 0, out.stdout + out.stderr
    lines = out.stdout.splitlines()
    assert "entry point web: HTTP/1.0, HTTP/1.1, h2c" in lines
    assert (
        "entry point websecure: HTTP/1.0, HTTP/1.1, h2c; TLS options default: ALPN http/1.1"
        in lines
    )
