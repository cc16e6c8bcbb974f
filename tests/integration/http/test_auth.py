"""basicAuth and digestAuth through a real entrypoint, under both codecs, with curl
as the client (``-u``, ``--digest``) and ``edge whoami`` as the backend (it echoes
the headers it received): the right password, a wrong one, no Authorization at
all, the user's name in ``headerField``, ``removeHeader``, a usersFile; and a
malformed htpasswd line or a missing usersFile disabling only that middleware,
with its reason in the log and the API, while the rest serves."""

from __future__ import annotations

import base64
import hashlib
import json
import subprocess

import bcrypt
import pytest

from tests.harness import Edge, get, lb, need

BCRYPT = bcrypt.hashpw(b"secret", bcrypt.gensalt(12)).decode()  # ~300 ms a check here
APR1 = "$apr1$H6uskkkW$IgXLP6ewTrSuBkTrqE8wj/"  # "test"
SHA = "{SHA}qUqP5cyxm6YcTAhz05Hph5gvu9M="  # "test"
HTDIGEST = "test:traefik:a2688e031edb4be6a3797f3882655c05"  # "test"
HTDIGEST_REALM = "ann:private:" + hashlib.md5(b"ann:private:pw").hexdigest()


@pytest.fixture(scope="module", params=["httptools", "h11"])
def edge(request, tmp_path_factory, whoami):
    tmp = tmp_path_factory.mktemp(f"auth-{request.param}")
    users_file = tmp / "htpasswd"
    users_file.write_text(f"# edge's tests\nfile:{APR1}\n\n")
    middlewares = {
        "basic": {
            "basicAuth": {
                "users": [f"admin:{BCRYPT}", f"test:{APR1}", f"sha:{SHA}"],
                "headerField": "X-Webauth-User",
                "realm": "edge tests",
            }
        },
        "basic-rm": {"basicAuth": {"usersFile": str(users_file), "removeHeader": True}},
        "digest": {"digestAuth": {"users": [HTDIGEST], "headerField": "X-Digest-User"}},
        "digest-rm": {
            "digestAuth": {"users": [HTDIGEST_REALM], "realm": "private", "removeHeader": True}
        },
        "plain": {"basicAuth": {"users": ["test:test"]}},
        "missing": {"basicAuth": {"usersFile": str(tmp / "nonexistent")}},
    }
    routers = {
        name: {"rule": f"Host(`{name}.example`)", "service": "app", "middlewares": [name]}
        for name in middlewares
    }
    routers["open"] = {"rule": "Host(`open.example`)", "service": "app"}
    dyn = {
        "http": {
            "routers": routers,
            "services": {"app": lb(whoami.url)},
            "middlewares": middlewares,
        }
    }
    e = Edge(tmp, dyn, parser=request.param, static_extra={"api": {"insecure": True}})
    yield e
    e.stop()


def curl(edge: Edge, host: str, *args: str, path: str = "/x") -> tuple[int, bytes]:
    """The status and body of the last response curl got (``--digest`` makes two
    requests: the challenge, then its answer)."""
    out = subprocess.run(
        [
            need("curl"),
            "-s",
            "--max-time",
            "20",
            "-H",
            f"Host: {host}",
            "-w",
            "\n%{http_code}",
            *args,
            f"http://127.0.0.1:{edge.port}{path}",
        ],
        capture_output=True,
        timeout=30,
    )
    body, _, status = out.stdout.rpartition(b"\n")
    return int(status), body


def received(body: bytes) -> dict:
    return json.loads(body)["headers"]


def test_basic_right_password_every_hash_and_header_field(edge):
    for user, password in (("admin", "secret"), ("test", "test"), ("sha", "test")):
        status, body = curl(edge, "basic.example", "-u", f"{user}:{password}")
        assert status == 200, body
        headers = received(body)
        assert headers["X-Webauth-User"] == [user]
        assert headers["Authorization"][0].startswith("Basic ")  # no removeHeader


def test_basic_header_field_replaces_the_clients(edge):
    status, body = curl(edge, "basic.example", "-u", "test:test", "-H", "x-webauth-user: root")
    assert status == 200
    headers = received(body)
    assert headers["X-Webauth-User"] == ["test"]
    assert "x-webauth-user" not in headers


@pytest.mark.parametrize("args", [("-u", "admin:wrong"), ("-u", "nobody:secret"), ()])
def test_basic_wrong_password_or_no_header_is_401(edge, args):
    status, body = curl(edge, "basic.example", *args)
    assert (status, body) == (401, b"401 Unauthorized\n")
    status, hdrs, _ = get(edge.port, "/x", host="basic.example")
    assert status == 401
    assert hdrs["WWW-Authenticate"] == 'Basic realm="edge tests"'


def test_basic_users_file_and_remove_header(edge):
    status, body = curl(edge, "basic-rm.example", "-u", "file:test")
    assert status == 200
    assert "Authorization" not in received(body)
    status, hdrs, _ = get(edge.port, "/x", host="basic-rm.example")
    assert (status, hdrs["WWW-Authenticate"]) == (401, 'Basic realm="traefik"')


def test_bcrypt_verified_once_then_served_from_the_cache(edge):
    """30 requests with the bcrypt user on one keep-alive connection: with a bcrypt
    per request that is 30 checks of ~300 ms (9 s and more on this machine);
    cached, one."""
    urls = [f"http://127.0.0.1:{edge.port}/n{i}" for i in range(30)]
    out = subprocess.run(
        [need("curl"), "-s", "--max-time", "60", "-H", "Host: basic.example", "-u", "admin:secret"]
        + [
            a
            for url in urls
            for a in ("-o", "/dev/null", "-w", "%{http_code} %{time_total}\n", url)
        ],
        capture_output=True,
        timeout=90,
        text=True,
    )
    lines = out.stdout.split()
    statuses, times = lines[0::2], [float(t) for t in lines[1::2]]
    assert statuses == ["200"] * 30, out.stdout
    # The first may pay the check; the rest cost less than one bcrypt each.
    assert sorted(times[1:])[len(times) // 2] < 0.15, times


def test_digest_with_curl(edge):
    status, body = curl(edge, "digest.example", "--digest", "-u", "test:test", path="/d?q=1")
    assert status == 200, body
    headers = received(body)
    assert headers["X-Digest-User"] == ["test"]
    assert headers["Authorization"][0].startswith("Digest username=")


def test_digest_wrong_password_or_no_header_is_401(edge):
    status, body = curl(edge, "digest.example", "--digest", "-u", "test:wrong")
    assert (status, body) == (401, b"401 Unauthorized\n")
    status, hdrs, _ = get(edge.port, "/x", host="digest.example")
    assert status == 401
    challenge = hdrs["WWW-Authenticate"]
    assert challenge.startswith('Digest realm="traefik", nonce="')
    assert challenge.endswith('algorithm="MD5", qop="auth"')


def test_digest_realm_and_remove_header(edge):
    status, body = curl(edge, "digest-rm.example", "--digest", "-u", "ann:pw")
    assert status == 200, body
    assert "Authorization" not in received(body)


def test_bad_users_disable_only_their_middleware(edge):
    """A plain-text password (Traefik builds it and never matches it) and a missing
    usersFile: that middleware and its router are disabled, with the key and line
    (and never the password) in the log and the API; everything else serves."""
    assert get(edge.port, "/x", host="plain.example")[0] == 404
    assert get(edge.port, "/x", host="missing.example")[0] == 404
    assert get(edge.port, "/x", host="open.example")[0] == 200
    edge.wait_for(r"middleware plain@file.*basicAuth\.users\[0\]: user 'test': not a hash", start=0)
    edge.wait_for(
        r"middleware missing@file.*basicAuth\.usersFile: '.*nonexistent': no such file", start=0
    )
    status, _, body = get(edge.ports["traefik"], "/api/http/middlewares/plain@file")
    info = json.loads(body)
    assert (status, info["status"]) == (200, "disabled")
    assert info["error"] == [
        "basicAuth.users[0]: user 'test': not a hash edge (or Traefik) can match: "
        "a plain-text password? (bcrypt $2y$/$2b$/$2a$/$2x$, MD5 $apr1$/$1$ and {SHA} "
        "are read: htpasswd -B, -m or -s)"
    ]


def test_basic_auth_guards_api_at_internal(tmp_path):
    """The common Traefik set-up: the API (``api`` without ``insecure``) behind a
    router of the user's with basicAuth. The API lists the middleware as
    Traefik does (``type: basicauth``, enabled)."""
    dyn = {
        "http": {
            "routers": {
                "dashboard": {
                    "rule": "Host(`api.test`)",
                    "service": "api@internal",
                    "middlewares": ["admin"],
                }
            },
            "middlewares": {"admin": {"basicAuth": {"users": [f"admin:{APR1}"]}}},
        }
    }
    e = Edge(tmp_path, dyn, static_extra={"api": {}})
    try:
        status, hdrs, _ = get(e.port, "/api/http/middlewares", host="api.test")
        assert (status, hdrs["WWW-Authenticate"]) == (401, 'Basic realm="traefik"')
        token = base64.b64encode(b"admin:test").decode()
        status, _, body = get(
            e.port,
            "/api/http/middlewares",
            host="api.test",
            headers={"Authorization": f"Basic {token}"},
        )
        assert status == 200, body
        [info] = json.loads(body)
        assert (info["name"], info["type"], info["status"]) == (
            "admin@file",
            "basicauth",
            "enabled",
        )
        assert info["basicAuth"]["users"] == ["xxxx"]  # a hash is a secret (edge.config.redact)
    finally:
        e.stop()


def test_the_401_is_go_http_auths(edge):
    """Status, challenge, body and Content-Type as Traefik answers."""
    for host in ("basic.example", "digest.example"):
        status, hdrs, body = get(edge.port, "/x", host=host)
        assert (status, body) == (401, b"401 Unauthorized\n")
        assert hdrs["Content-Type"] == "text/plain"
