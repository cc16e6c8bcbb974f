"""The access log's HTTP lines in ``json`` (Traefik's keys), checked field by field
against requests of known shape through a real edge: under both codecs, over TLS edge
terminated (with a client certificate), retried by the retry middleware, behind
basicAuth; then what ``filters``, ``fields`` and ``addInternals`` change.
"""

from __future__ import annotations

import base64
import datetime
import json
import socket
import ssl
import subprocess
import time

import pytest

from tests.harness import Edge, get, lb, need, read_response
from tests.integration.config.test_logs import wait_lines
from tests.integration.peers import certificates, free_port

# openssl passwd -apr1 -salt abcdefgh secret
BOB = "bob:$apr1$abcdefgh$h9FWgUz3n9YxylKLlR5SQ/"


def records(path, count: int) -> list[dict]:
    return [json.loads(line) for line in wait_lines(path, count)]


def routes(whoami, **extra) -> dict:
    return {
        "http": {
            "routers": {"a": {"rule": "Host(`a.test`)", "service": "s"}},
            "services": {"s": lb(whoami.url)},
            **extra,
        }
    }


def access_log(path, **extra) -> dict:
    return {"accessLog": {"filePath": str(path), "format": "json", **extra}}


def exchange(port: int, request: bytes) -> tuple[int, bytes]:
    """(the client's port, the response) of one request on a connection of its own."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(request)
        return s.getsockname()[1], read_response(s)


def test_json_fields_of_a_proxied_request(tmp_path, parser, whoami):
    """Every field of a POST with a body, a Host with a port, a query and headers kept,
    redacted and dropped; and the line's keys sorted, as Go's encoder writes a map."""
    log = tmp_path / "access.log"
    headers = {
        "defaultMode": "keep",
        "names": {"x-secret": "redact", "X-Dropped": "drop"},
    }
    e = Edge(
        tmp_path,
        routes(whoami),
        parser=parser,
        static_extra=access_log(log, fields={"headers": headers}),
    )
    try:
        before = time.time()
        port, response = exchange(
            e.port,
            b"POST /p/q?x=1&y=2 HTTP/1.1\r\nHost: a.test:8080\r\nUser-Agent: probe/1\r\n"
            b"Referer: http://r.test/\r\nX-Secret: hunter2\r\nX-Dropped: no\r\n"
            b"X-Multi: a\r\nX-Multi: b\r\nContent-Length: 5\r\n\r\nhello",
        )
        after = time.time()
        (line,) = wait_lines(log, 1)
    finally:
        e.stop()
    head, _, body = response.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200"), response
    r = json.loads(line)
    assert list(r) == sorted(r), "keys are sorted"
    assert r["ClientAddr"] == f"127.0.0.1:{port}"
    assert (r["ClientHost"], r["ClientPort"], r["ClientUsername"]) == ("127.0.0.1", str(port), "-")
    assert (r["RequestAddr"], r["RequestHost"], r["RequestPort"]) == (
        "a.test:8080",
        "a.test",
        "8080",
    )
    assert (r["RequestMethod"], r["RequestPath"]) == ("POST", "/p/q?x=1&y=2")
    assert (r["RequestProtocol"], r["RequestScheme"]) == ("HTTP/1.1", "http")
    assert r["RequestLine"] == "POST /p/q?x=1&y=2 HTTP/1.1"
    assert r["RequestContentSize"] == 5
    assert (r["DownstreamStatus"], r["DownstreamContentSize"]) == (200, len(body))
    assert (r["OriginStatus"], r["OriginContentSize"]) == (200, len(body))
    assert (r["RouterName"], r["ServiceName"]) == ("a@file", "s@file")
    assert r["ServiceURL"] == whoami.url
    assert r["ServiceAddr"] == f"127.0.0.1:{whoami.port}"
    assert (r["entryPointName"], r["RetryAttempts"]) == ("web", 0)
    assert isinstance(r["RequestCount"], int) and r["RequestCount"] >= 1
    assert 0 < r["Duration"] < (after - before) * 1e9
    assert 0 < r["OriginDuration"] <= r["Duration"]
    assert r["Overhead"] == r["Duration"] - r["OriginDuration"]
    assert (r["level"], r["msg"]) == ("info", "")
    start = datetime.datetime.fromisoformat(r["StartUTC"])
    assert r["StartUTC"].endswith("Z") and before - 1 <= start.timestamp() <= after
    assert datetime.datetime.fromisoformat(r["StartLocal"]).timestamp() == start.timestamp()
    assert abs(datetime.datetime.fromisoformat(r["time"]).timestamp() - after) < 5
    assert not any(k.startswith("TLS") for k in r), "no TLS"
    # Headers: Go's spelling, several values joined, one redacted, one dropped, no Host.
    assert r["request_User-Agent"] == "probe/1"
    assert r["request_Referer"] == "http://r.test/"
    assert r["request_X-Multi"] == "a,b"
    assert r["request_X-Secret"] == "REDACTED"
    assert r["request_Content-Length"] == "5"
    assert "request_X-Dropped" not in r and "request_Host" not in r
    assert r["origin_Content-Type"] == "application/json"
    assert r["downstream_Content-Length"] == str(len(body))


def test_a_chunked_upload_s_size_is_the_bytes_sent(tmp_path, parser, whoami):
    """RequestContentSize is what the client sent, as Traefik counts the bytes read:
    curl's chunked upload states no length."""
    log = tmp_path / "access.log"
    body = tmp_path / "upload.bin"
    body.write_bytes(bytes(range(256)) * 50)  # 12,800 bytes
    e = Edge(tmp_path, routes(whoami), parser=parser, static_extra=access_log(log))
    try:
        done = subprocess.run(
            [
                "curl", "-sS", "--max-time", "10", "-o", "/dev/null", "-w", "%{http_code}",
                "-H", "Host: a.test", "-H", "Transfer-Encoding: chunked",
                "--data-binary", f"@{body}", e.url + "/up",
            ],
            capture_output=True,
            timeout=30,
            check=True,
        )  # fmt: skip
        assert done.stdout == b"200"
        (r,) = records(log, 1)
    finally:
        e.stop()
    assert (r["RequestMethod"], r["DownstreamStatus"]) == ("POST", 200)
    assert r["RequestContentSize"] == 12_800


def test_a_plain_get_s_overhead_is_edge_s_own_time(tmp_path, parser, whoami):
    """Overhead is Duration less OriginDuration on the express path too (a route
    without middlewares, a plain GET: httptools' quick parse), not 0."""
    log = tmp_path / "access.log"
    e = Edge(tmp_path, routes(whoami), parser=parser, static_extra=access_log(log))
    try:
        for _ in range(3):
            status, _, _ = get(e.port, "/plain", host="a.test")
            assert status == 200
        lines = records(log, 3)
    finally:
        e.stop()
    for r in lines:
        assert 0 < r["OriginDuration"] < r["Duration"]
        assert r["Overhead"] == r["Duration"] - r["OriginDuration"] > 0


def test_json_fields_of_edge_own_answer(tmp_path, parser, whoami):
    """No router: no RouterName or Service* keys, no origin; a Host without a port."""
    log = tmp_path / "access.log"
    e = Edge(tmp_path, routes(whoami), parser=parser, static_extra=access_log(log))
    try:
        status, _, body = get(e.port, "/nowhere", host="nobody.test")
        assert status == 404
        (r,) = records(log, 1)
    finally:
        e.stop()
    assert (r["DownstreamStatus"], r["DownstreamContentSize"]) == (404, len(body))
    assert (r["OriginStatus"], r["OriginContentSize"], r["OriginDuration"]) == (0, 0, 0)
    assert r["Overhead"] == r["Duration"] > 0
    assert (r["RequestHost"], r["RequestPort"]) == ("nobody.test", "-")
    assert not {"RouterName", "ServiceName", "ServiceURL", "ServiceAddr"} & set(r)
    assert not any(k.startswith(("request_", "origin_", "downstream_")) for k in r)


def test_tls_fields(tmp_path, certs, pki, whoami):
    """TLSVersion and TLSCipher (Go's names) of TLS 1.3 and 1.2 handshakes, and the client
    certificate's subject, on an HTTPS router that asks for one."""
    client = pki.issue(cn="alice", client=True).write(tmp_path, "alice")
    log = tmp_path / "access.log"
    dynamic = {
        "http": {
            "routers": {"a": {"rule": "Host(`a.test`)", "service": "s", "tls": {}}},
            "services": {"s": lb(whoami.url)},
        },
        "tls": {
            "certificates": certificates(certs, "a.test"),
            "options": {
                "default": {
                    "clientAuth": {
                        "caFiles": [certs["ca"]],
                        "clientAuthType": "VerifyClientCertIfGiven",
                    }
                }
            },
        },
    }
    e = Edge(tmp_path, dynamic, static_extra=access_log(log))

    def https(maximum: ssl.TLSVersion, cert: tuple[str, str] | None = None) -> None:
        ctx = ssl.create_default_context(cafile=certs["ca"])
        ctx.maximum_version = maximum
        if maximum == ssl.TLSVersion.TLSv1_2:
            ctx.set_ciphers("ECDHE-ECDSA-AES128-GCM-SHA256")
        if cert is not None:
            ctx.load_cert_chain(*cert)
        with (
            socket.create_connection(("127.0.0.1", e.port), timeout=10) as raw,
            ctx.wrap_socket(raw, server_hostname="a.test") as s,
        ):
            s.sendall(b"GET /t HTTP/1.1\r\nHost: a.test\r\n\r\n")
            assert read_response(s).startswith(b"HTTP/1.1 200")

    try:
        https(ssl.TLSVersion.TLSv1_3)
        https(ssl.TLSVersion.TLSv1_2)
        https(ssl.TLSVersion.TLSv1_3, client)
        tls13, tls12, mutual = records(log, 3)
    finally:
        e.stop()
    assert tls13["RequestScheme"] == "https"
    assert tls13["TLSVersion"] == "1.3"
    assert tls13["TLSCipher"] in ("TLS_AES_256_GCM_SHA384", "TLS_AES_128_GCM_SHA256")
    assert "TLSClientSubject" not in tls13
    assert (tls12["TLSVersion"], tls12["TLSCipher"]) == (
        "1.2",
        "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256",
    )
    assert mutual["TLSClientSubject"] == "CN=alice"


def test_retry_attempts(tmp_path, whoami, whoami2):
    """Round robin over a refused server and two good ones, with retry: every other
    request's first try is refused and says RetryAttempts 1, the others 0 (a retry
    takes the next server in turn); all were answered by a good one."""
    dead = f"http://127.0.0.1:{free_port()}"
    log = tmp_path / "access.log"
    dynamic = {
        "http": {
            "routers": {"a": {"rule": "Host(`a.test`)", "service": "s", "middlewares": ["r"]}},
            "middlewares": {"r": {"retry": {"attempts": 2}}},
            "services": {"s": lb(dead, whoami.url, whoami2.url)},
        }
    }
    e = Edge(tmp_path, dynamic, static_extra=access_log(log))
    try:
        for _ in range(4):
            assert get(e.port, "/", host="a.test")[0] == 200
        lines = records(log, 4)
    finally:
        e.stop()
    assert [r["RetryAttempts"] for r in lines] == [1, 0, 1, 0]
    assert [r["ServiceURL"] for r in lines] == [whoami.url, whoami2.url] * 2


def test_client_username_from_basic_auth(tmp_path, parser, whoami):
    """The user of the credentials basicAuth read, authenticated or not, in json and
    CLF; ``-`` without credentials."""
    log = tmp_path / "access.log"
    dynamic = routes(whoami, middlewares={"auth": {"basicAuth": {"users": [BOB]}}})
    dynamic["http"]["routers"]["a"]["middlewares"] = ["auth"]
    e = Edge(tmp_path, dynamic, parser=parser, static_extra=access_log(log))

    def basic(user: str, password: str) -> dict:
        token = base64.b64encode(f"{user}:{password}".encode()).decode()
        return {"Authorization": f"Basic {token}"}

    try:
        assert get(e.port, "/", host="a.test", headers=basic("bob", "secret"))[0] == 200
        assert get(e.port, "/", host="a.test", headers=basic("bob", "wrong"))[0] == 401
        assert get(e.port, "/", host="a.test")[0] == 401
        good, wrong, none = records(log, 3)
    finally:
        e.stop()
    assert (good["ClientUsername"], good["DownstreamStatus"]) == ("bob", 200)
    assert (wrong["ClientUsername"], wrong["DownstreamStatus"]) == ("bob", 401)
    assert (none["ClientUsername"], none["DownstreamStatus"]) == ("-", 401)
    assert wrong["OriginStatus"] == 0 and "ServiceURL" not in wrong  # basicAuth answered


def test_a_trusted_client_is_its_x_forwarded_for(tmp_path, whoami):
    """ClientHost is a trusted client's X-Forwarded-For (Traefik's); an untrusted one's is
    not believed."""
    log = tmp_path / "access.log"
    entrypoints = {
        "web": {"address": "127.0.0.1:0", "forwardedHeaders": {"trustedIPs": ["127.0.0.1"]}},
        "other": {"address": "127.0.0.1:0"},
    }
    e = Edge(tmp_path, routes(whoami), entrypoints=entrypoints, static_extra=access_log(log))
    try:
        xff = {"X-Forwarded-For": "203.0.113.9"}
        assert get(e.port, "/", host="a.test", headers=xff)[0] == 200
        assert get(e.ports["other"], "/", host="a.test", headers=xff)[0] == 200
        trusted, untrusted = records(log, 2)
    finally:
        e.stop()
    assert (trusted["ClientHost"], trusted["entryPointName"]) == ("203.0.113.9", "web")
    assert (untrusted["ClientHost"], untrusted["entryPointName"]) == ("127.0.0.1", "other")


# -- filters, fields, addInternals ------------------------------------------------------


def test_status_code_and_duration_filters(tmp_path, whoami):
    """A line is kept when its status is in statusCodes or it took longer than
    minDuration; a quick 200 is not."""
    log = tmp_path / "access.log"
    filters = {"statusCodes": ["404", "500-504"], "minDuration": "300ms"}
    e = Edge(tmp_path, routes(whoami), static_extra=access_log(log, filters=filters))
    try:
        assert get(e.port, "/quick", host="a.test")[0] == 200
        assert get(e.port, "/missing", host="nobody.test")[0] == 404
        assert get(e.port, "/fail?status=503", host="a.test")[0] == 503
        assert get(e.port, "/slow?delay=0.4", host="a.test")[0] == 200
        assert get(e.port, "/teapot?status=418", host="a.test")[0] == 418
        kept = records(log, 3)
        time.sleep(0.5)  # what else would have come by now
        assert len(wait_lines(log, 3)) == 3
    finally:
        e.stop()
    assert [r["RequestPath"] for r in kept] == ["/missing", "/fail?status=503", "/slow?delay=0.4"]
    assert kept[2]["Duration"] > 300_000_000


def test_retry_attempts_filter(tmp_path, whoami, whoami2):
    """filters.retryAttempts keeps only the requests that were retried."""
    dead = f"http://127.0.0.1:{free_port()}"
    log = tmp_path / "access.log"
    dynamic = {
        "http": {
            "routers": {"a": {"rule": "Host(`a.test`)", "service": "s", "middlewares": ["r"]}},
            "middlewares": {"r": {"retry": {"attempts": 2}}},
            "services": {"s": lb(dead, whoami.url, whoami2.url)},
        }
    }
    e = Edge(tmp_path, dynamic, static_extra=access_log(log, filters={"retryAttempts": True}))
    try:
        for _ in range(4):
            assert get(e.port, "/", host="a.test")[0] == 200
        kept = records(log, 2)
        time.sleep(0.3)
        assert len(wait_lines(log, 2)) == 2
    finally:
        e.stop()
    assert [r["RetryAttempts"] for r in kept] == [1, 1]


def test_fields_default_mode_drop_keeps_the_names_kept(tmp_path, whoami):
    """fields.defaultMode drop with names kept (any case): those and logrus's own keys;
    queryParameters drop cuts the query from the path."""
    log = tmp_path / "access.log"
    fields = {
        "defaultMode": "drop",
        "names": {"routername": "keep", "RequestPath": "keep", "DownstreamStatus": "keep"},
        "queryParameters": {"defaultMode": "drop"},
    }
    e = Edge(tmp_path, routes(whoami), static_extra=access_log(log, fields=fields))
    try:
        assert get(e.port, "/x?secret=1", host="a.test")[0] == 200
        (r,) = records(log, 1)
    finally:
        e.stop()
    assert r.pop("time") and r == {
        "DownstreamStatus": 200,
        "RequestPath": "/x",
        "RouterName": "a@file",
        "level": "info",
        "msg": "",
    }


def test_fields_names_drop_one_field(tmp_path, whoami):
    log = tmp_path / "access.log"
    fields = {"names": {"ClientUsername": "drop", "StartUTC": "drop"}}
    e = Edge(tmp_path, routes(whoami), static_extra=access_log(log, fields=fields))
    try:
        assert get(e.port, "/", host="a.test")[0] == 200
        (r,) = records(log, 1)
    finally:
        e.stop()
    assert "ClientUsername" not in r and "StartUTC" not in r
    assert "StartLocal" in r and r["DownstreamStatus"] == 200


@pytest.mark.parametrize("internals", [False, True])
def test_internal_answers_only_with_add_internals(tmp_path, whoami, internals):
    """/ping, /ready and the API are edge's own services (Traefik's ``*@internal``):
    logged with addInternals only; a request routed on that entry point always is."""
    log = tmp_path / "access.log"
    static = {**access_log(log, addInternals=internals), "api": {"insecure": True}}
    e = Edge(tmp_path, routes(whoami), static_extra=static)
    try:
        internal = e.ports["traefik"]
        assert get(internal, "/ping")[0] == 200
        assert get(internal, "/api/http/routers")[0] == 200
        assert get(e.port, "/routed", host="a.test")[0] == 200
        lines = records(log, 3 if internals else 1)
        time.sleep(0.3)
        lines = records(log, len(lines))
    finally:
        e.stop()
    paths = [r["RequestPath"] for r in lines]
    if internals:
        assert {"/ping", "/api/http/routers", "/routed"} <= set(paths)
    else:
        assert paths == ["/routed"]


@pytest.mark.parametrize("internals", [False, True])
def test_an_entry_point_redirect_is_logged_only_with_add_internals(tmp_path, whoami, internals):
    """An entry point's redirect is its router ``web-to-websecure@internal``: logged
    with addInternals only, as edge's other own answers."""
    log = tmp_path / "access.log"
    eps = {
        "web": {
            "address": "127.0.0.1:0",
            "http": {"redirections": {"entryPoint": {"to": "websecure"}}},
        },
        "websecure": {"address": "127.0.0.1:0"},
    }
    e = Edge(
        tmp_path,
        routes(whoami),
        entrypoints=eps,
        static_extra=access_log(log, addInternals=internals),
    )
    try:
        assert get(e.ports["web"], "/moved", host="a.test")[0] == 301
        assert get(e.ports["websecure"], "/routed", host="a.test")[0] == 200
        lines = records(log, 2 if internals else 1)
        time.sleep(0.3)
        lines = records(log, len(lines))
    finally:
        e.stop()
    seen = [(r["RequestPath"], r["DownstreamStatus"], r.get("RouterName")) for r in lines]
    moved = ("/moved", 301, "web-to-websecure@internal")
    assert (moved in seen) is internals, seen
    assert ("/routed", 200, "a@file") in seen, seen


def test_an_http2_request(tmp_path, whoami):
    """A stream of an HTTP/2 connection (h2c, prior knowledge) is a line of its own."""
    log = tmp_path / "access.log"
    e = Edge(tmp_path, routes(whoami), static_extra=access_log(log))
    try:
        url = f"http://127.0.0.1:{e.port}/h2?x=1"
        done = subprocess.run(
            [need("curl"), "-sS", "--http2-prior-knowledge", "-H", "Host: a.test", url],
            capture_output=True,
            timeout=30,
        )
        assert done.returncode == 0, done.stderr
        (r,) = records(log, 1)
    finally:
        e.stop()
    assert (r["RequestProtocol"], r["RequestLine"]) == ("HTTP/2.0", "GET /h2?x=1 HTTP/2.0")
    assert (r["DownstreamStatus"], r["DownstreamContentSize"]) == (200, len(done.stdout))
    assert r["RouterName"] == "a@file" and r["ClientPort"].isdigit()
