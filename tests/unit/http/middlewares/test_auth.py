"""The auth middlewares (edge.http.middlewares.auth) on Traefik's test tables
(pkg/middlewares/auth: basic_auth_test.go, digest_auth_test.go): the answers, the
headers sent upstream, the users a file and ``users`` make; the verification
cache (one check per credential, never a wrong password taken); the Digest
exchange as go-http-auth runs it (nonce counts, stale, replay)."""

from __future__ import annotations

import base64
import hashlib
import re

import msgspec
import pytest

from edge.config.dynamic import BasicAuth as BasicAuthConfig
from edge.config.dynamic import DigestAuth as DigestAuthConfig
from edge.config.dynamic import Middleware as MiddlewareConfig
from edge.http.codec import RequestHead
from edge.http.middlewares import Answer, Forward
from edge.http.middlewares.auth import (
    VERIFIED_KEPT,
    BasicAuth,
    DigestAuth,
    basic_auth,
    digest_auth,
    digest_params,
)

APR1_TEST = "test:$apr1$H6uskkkW$IgXLP6ewTrSuBkTrqE8wj/"
APR1_TEST2 = "test2:$apr1$d9hr9HBB$4HxwgUir3HP4EsggP/QNo0"
APR1_TEST3 = "test3:$apr1$3rJbDP0q$RfzJiorTk78jQ1EcKqWso0"
APR1_OVERRIDDEN = "test2:$apr1$mK.GtItK$ncnLYvNLek0weXdxo68690"
BCRYPT_TEST = "test:$2a$04$.8sTYfcxbSplCtoxt5TdJOgpBYkarKtZYsYfYxQ1edbYRuO1DNi0e"


def request(
    headers: list[tuple[bytes, bytes]], target: bytes = b"/", method: bytes = b"GET"
) -> Forward:
    head = RequestHead(method, target, b"1.1", headers, True, False, None, False, False)
    path, _, query = target.partition(b"?")
    return Forward("a.example", path, query, method, b"a.example", b"http", None, head)


def basic(user: str, password: str) -> list[tuple[bytes, bytes]]:
    token = base64.b64encode(f"{user}:{password}".encode())
    return [(b"Host", b"a.example"), (b"Authorization", b"Basic " + token)]


def build_basic(**config) -> BasicAuth:
    return basic_auth("auth@file", msgspec.convert(config, BasicAuthConfig))


def upstream(fwd: Forward) -> list[tuple[bytes, bytes]]:
    return fwd.headers or []


# --- basicAuth ---------------------------------------------------------------------


def test_basic_success_and_fail():
    """TestBasicAuthSuccess, TestBasicAuthFail (the plain-text line is refused by the
    model instead: see test_htpasswd), and the challenge Traefik writes."""
    m = build_basic(users=[APR1_TEST])
    fwd = request(basic("test", "test"))
    assert m.request(fwd) is None
    assert upstream(fwd) == []  # Authorization goes upstream as it came
    for headers in (basic("test", "wrong"), basic("foo", "foo"), [(b"Host", b"a.example")]):
        answer = m.request(request(headers))
        assert isinstance(answer, Answer)
        assert answer.status == 401
        assert answer.lines == b'WWW-Authenticate: Basic realm="traefik"\r\n'
        assert answer.body == b"401 Unauthorized\n"


@pytest.mark.parametrize(
    "value",
    [
        b"Basic",
        b"Basic ",
        b"Basic !!!!",
        b"Basic dGVzdA==",  # "test": no colon
        b"Basic dGVzdDI6dGVzdDI",  # test2:test2, unpadded
        b"Bearer dGVzdDp0ZXN0",
        b"Basic  dGVzdDp0ZXN0",
        b"Digest dGVzdDp0ZXN0",
    ],
)
def test_basic_malformed_credentials_are_refused(value):
    m = build_basic(users=[APR1_TEST, APR1_TEST2])
    assert m.request(request([(b"Authorization", b"Basic dGVzdDI6dGVzdDI=")])) is None
    answer = m.request(request([(b"Authorization", value)]))
    assert answer is not None and answer.status == 401


def test_basic_scheme_in_any_case_and_the_first_header():
    m = build_basic(users=[APR1_TEST])
    token = base64.b64encode(b"test:test")
    assert m.request(request([(b"authorization", b"bAsIc " + token)])) is None
    second = [(b"Authorization", b"Basic x"), (b"Authorization", b"Basic " + token)]
    assert m.request(request(second)) is not None  # Go's Header.Get: the first


def test_basic_user_header():
    """TestBasicAuthUserHeader and ...Canonical: the name goes in headerField, spelt
    as configured, replacing what the client sent in any spelling."""
    m = build_basic(users=[APR1_TEST], headerField="x-user")
    fwd = request([*basic("test", "test"), (b"X-User", b"admin")])
    assert m.request(fwd) is None
    assert upstream(fwd) == [(b"x-user", b"test")]  # a set header replaces every X-User


def test_basic_header_removed_or_present():
    """TestBasicAuthHeaderRemoved / TestBasicAuthHeaderPresent."""
    removed = build_basic(users=[APR1_TEST], removeHeader=True)
    fwd = request(basic("test", "test"))
    assert removed.request(fwd) is None
    assert upstream(fwd) == [(b"Authorization", b"")]  # an empty value removes
    kept = build_basic(users=[APR1_TEST])
    fwd = request(basic("test", "test"))
    assert kept.request(fwd) is None
    assert upstream(fwd) == []


def test_basic_realm():
    m = build_basic(users=[APR1_TEST], realm="traefiker")
    answer = m.request(request(basic("foo", "foo")))
    assert answer is not None and answer.lines == b'WWW-Authenticate: Basic realm="traefiker"\r\n'


# TestBasicAuthUsersFromFile: (file, users, who gets in)
USERS_FROM_FILE = [
    (
        "finds the users in the file",
        [APR1_TEST, APR1_TEST2],
        [],
        {"test": "test", "test2": "test2"},
    ),
    (
        "merges given users with users from the file",
        [APR1_TEST],
        [APR1_TEST2, APR1_TEST3],
        {"test": "test", "test2": "test2", "test3": "test3"},
    ),
    (
        "given users have priority over users in the file",
        [APR1_TEST, APR1_TEST2],
        [APR1_OVERRIDDEN],
        {"test": "test", "test2": "overridden"},
    ),
    ("skips comments", ["#Comment", APR1_TEST, APR1_TEST2], [], {"test": "test", "test2": "test2"}),
]


@pytest.mark.parametrize(("desc", "lines", "users", "expected"), USERS_FROM_FILE)
def test_basic_users_from_file(tmp_path, desc, lines, users, expected):
    f = tmp_path / "auth-users"
    f.write_text("\n".join(lines) + "\n")
    m = build_basic(users=users, usersFile=str(f))
    for user, password in expected.items():
        assert m.request(request(basic(user, password))) is None, (desc, user)
    assert m.request(request(basic("foo", "foo"))) is not None
    if desc.startswith("given users have priority"):
        assert m.request(request(basic("test2", "test2"))) is not None


class CountingBasicAuth(BasicAuth):
    """Counts the full checks (the bcrypt runs) a request costs."""

    __slots__ = ("checks",)

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.checks = 0

    def check(self, value: bytes) -> str | None:
        self.checks += 1
        return super().check(value)


def test_basic_bcrypt_checked_once_per_credential():
    """TestBasicAuthConcurrentHashOnce's point, on one loop: a credential verified
    once is not hashed again; a wrong one is refused from then on without a hash
    either, and is never taken for the right one (nor the right one for it)."""
    user, hashed = BCRYPT_TEST.split(":")
    m = CountingBasicAuth("auth@file", {user: hashed})
    for _ in range(5):
        assert m.request(request(basic("test", "test"))) is None
    assert m.checks == 1
    for _ in range(3):
        assert m.request(request(basic("test", "tesT"))) is not None
    assert m.checks == 2
    assert m.request(request(basic("test", "Test"))) is not None  # another: checked
    assert m.checks == 3
    assert (len(m.verified), len(m.refused)) == (1, 2)
    assert m.request(request(basic("test", "test"))) is None
    assert m.checks == 3


def test_basic_cache_is_bounded_and_keeps_no_credential():
    sha = "{SHA}" + base64.b64encode(hashlib.sha1(b"pw").digest()).decode()
    users = {f"u{i}": sha for i in range(VERIFIED_KEPT + 10)}
    m = CountingBasicAuth("auth@file", users)
    for i in range(VERIFIED_KEPT + 10):
        assert m.request(request(basic(f"u{i}", "pw"))) is None
    for i in range(VERIFIED_KEPT + 10):
        assert m.request(request(basic(f"u{i}", "wrong"))) is not None
    assert len(m.verified) == len(m.refused) == VERIFIED_KEPT
    token = base64.b64encode(b"u0:pw")
    for key in m.verified:  # keyed hashes, not the values
        assert len(key) == 16 and token not in key
    checks = m.checks
    assert m.request(request(basic("u0", "pw"))) is None  # the least recently used went first
    assert m.checks == checks + 1
    assert m.request(request(basic(f"u{VERIFIED_KEPT + 9}", "pw"))) is None  # still kept
    assert m.checks == checks + 1


def test_basic_unknown_user_costs_a_check():
    """Traefik's notFoundSecret: an unknown name is checked against a known user's
    hash, so the time taken does not say which names exist."""
    user, hashed = BCRYPT_TEST.split(":")
    m = BasicAuth("auth@file", {user: hashed})
    assert m.not_found == hashed
    assert m.check(base64.b64encode(b"nobody:test").join([b"Basic ", b""])) is None


def test_basic_build_when_the_file_went_away(tmp_path, caplog):
    """Checked with its file, built after it was removed: nobody gets in, and the
    log says why (a file the configuration check read may change before the build)."""
    f = tmp_path / "users"
    f.write_text(APR1_TEST + "\n")
    config = msgspec.convert({"usersFile": str(f)}, BasicAuthConfig)
    config.check()
    f.unlink()
    with caplog.at_level("ERROR"):
        m = basic_auth("auth@file", config)
    assert m.request(request(basic("test", "test"))) is not None
    assert "middleware auth@file: basicAuth.usersFile:" in caplog.text
    assert "every request refused" in caplog.text


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({"basicAuth": {"users": ["test:test"]}}, "basicAuth.users[0]: user 'test': not a hash"),
        ({"basicAuth": {"users": []}}, "basicAuth.users: no user"),
        (
            {"basicAuth": {"users": [APR1_TEST], "headerField": "X User"}},
            "basicAuth.headerField: invalid header name",
        ),
        (
            {"basicAuth": {"users": [APR1_TEST], "realm": "a\r\nb"}},
            "basicAuth.realm: a value may not hold CR, LF",
        ),
        ({"digestAuth": {"users": ["test"]}}, "digestAuth.users[0]: not an htdigest line"),
        (
            {"digestAuth": {"usersFile": "/nonexistent/users"}},
            "digestAuth.usersFile: '/nonexistent/users': no such file",
        ),
    ],
)
def test_model_check_names_the_key(config, message):
    model = msgspec.convert(config, MiddlewareConfig)
    [error] = model.check()
    assert error.startswith(message), error


# --- digestAuth ----------------------------------------------------------------------

DIGEST_TEST = "test:traefik:a2688e031edb4be6a3797f3882655c05"  # password "test"
DIGEST_TEST2 = "test2:traefik:518845800f9e2bfb1f1f740ec24f074e"  # "test2"
DIGEST_TEST3 = "test3:traefik:c8e9f57ce58ecb4424407f665a91646c"  # "test3"
DIGEST_OVERRIDDEN = "test2:traefik:8de60a1c52da68ccf41f0c0ffb7c51a0"  # "overridden"
DIGEST_REALM2 = "test:traefiker:a3d334dff2645b914918de78bec50bf4"  # "test2"


def md5(text: str) -> str:
    return hashlib.md5(text.encode()).hexdigest()


class DigestClient:
    """RFC 2617's client side, as curl --digest and Traefik's test client answer a
    challenge: HA1 from the password, qop=auth, a counter per nonce."""

    def __init__(self, user: str, password: str) -> None:
        self.user = user
        self.password = password
        self.challenge: dict[bytes, bytes] = {}
        self.nc = 0

    def read(self, answer: Answer) -> None:
        m = re.match(rb"WWW-Authenticate: Digest (.*)\r\n$", answer.lines)
        assert m, answer.lines
        self.challenge = digest_params(m.group(1))
        self.nc = 0

    def header(
        self, method: str = "GET", uri: str = "/", nc: int | None = None, **override: str
    ) -> list[tuple[bytes, bytes]]:
        if nc is None:
            self.nc += 1
            nc = self.nc
        c = {k.decode(): v.decode() for k, v in self.challenge.items()}
        realm, nonce, cnonce = c["realm"], c["nonce"], "0a4f113b"
        ha1 = md5(f"{self.user}:{realm}:{self.password}")
        ha2 = md5(f"{method}:{uri}")
        fields = {
            "username": self.user,
            "realm": realm,
            "nonce": nonce,
            "uri": uri,
            "nc": f"{nc:08x}",
            "cnonce": cnonce,
            "qop": "auth",
            "opaque": c["opaque"],
            "algorithm": "MD5",
        }
        fields["response"] = md5(f"{ha1}:{nonce}:{nc:08x}:{cnonce}:auth:{ha2}")
        fields.update(override)
        value = ", ".join(
            f"{k}={v}" if k in ("nc", "qop", "algorithm") else f'{k}="{v}"'
            for k, v in fields.items()
        )
        return [(b"Host", b"a.example"), (b"Authorization", b"Digest " + value.encode())]


def build_digest(**config) -> DigestAuth:
    return digest_auth("digest@file", msgspec.convert(config, DigestAuthConfig))


def login(m: DigestAuth, client: DigestClient, target: bytes = b"/", **kw) -> Answer | None:
    """A challenge, then the request answering it."""
    first = m.request(request([(b"Host", b"a.example")], target))
    assert first is not None and first.status == 401
    client.read(first)
    return m.request(request(client.header(uri=kw.pop("uri", target.decode()), **kw), target))


def test_digest_challenge_as_go_http_auth_writes_it():
    m = build_digest(users=[DIGEST_TEST])
    answer = m.request(request([(b"Host", b"a.example")]))
    assert answer is not None and answer.status == 401 and answer.body == b"401 Unauthorized\n"
    assert re.fullmatch(
        rb'WWW-Authenticate: Digest realm="traefik", nonce="[A-Za-z0-9+/]{16}", '
        rb'opaque="[A-Za-z0-9+/]{16}", algorithm="MD5", qop="auth"\r\n',
        answer.lines,
    )


def test_digest_fail_with_basic_credentials():
    """TestDigestAuthFail."""
    m = build_digest(users=[DIGEST_TEST])
    answer = m.request(request(basic("test", "test")))
    assert answer is not None and answer.status == 401


# TestDigestAuthUsersFromFile: (file, users, realm, who gets in)
DIGEST_FROM_FILE = [
    (
        "finds the users in the file",
        [DIGEST_TEST, DIGEST_TEST2],
        [],
        "",
        {"test": "test", "test2": "test2"},
    ),
    (
        "merges given users with users from the file",
        [DIGEST_TEST],
        [DIGEST_TEST2, DIGEST_TEST3],
        "",
        {"test": "test", "test2": "test2", "test3": "test3"},
    ),
    (
        "given users have priority over users in the file",
        [DIGEST_TEST, DIGEST_TEST2],
        [DIGEST_OVERRIDDEN],
        "",
        {"test": "test", "test2": "overridden"},
    ),
    (
        "authenticates the user of the realm",
        [DIGEST_TEST, DIGEST_REALM2],
        [],
        "traefiker",
        {"test": "test2"},
    ),
]


@pytest.mark.parametrize(("desc", "lines", "users", "realm", "expected"), DIGEST_FROM_FILE)
def test_digest_users_from_file(tmp_path, desc, lines, users, realm, expected):
    f = tmp_path / "auth-users"
    f.write_text("\n".join(lines) + "\n")
    m = build_digest(users=users, usersFile=str(f), realm=realm)
    for user, password in expected.items():
        assert login(m, DigestClient(user, password)) is None, (desc, user)
    assert login(m, DigestClient("foo", "foo")) is not None


def test_digest_upstream_headers():
    m = build_digest(users=[DIGEST_TEST], headerField="X-Webauth-User", removeHeader=True)
    client = DigestClient("test", "test")
    first = m.request(request([]))
    assert first is not None
    client.read(first)
    fwd = request(client.header(uri="/x?y=1"), b"/x?y=1")
    assert m.request(fwd) is None
    assert upstream(fwd) == [(b"X-Webauth-User", b"test"), (b"Authorization", b"")]


def test_digest_nonce_counts_replay_and_stale():
    """go-http-auth's session check: each request on a nonce counts up; the same
    count again is a replay (401), a lower one is stale (401 with stale="true":
    the client retries without asking its user), a nonce edge never gave is
    refused."""
    m = build_digest(users=[DIGEST_TEST])
    client = DigestClient("test", "test")
    assert login(m, client) is None  # nc=1
    assert m.request(request(client.header())) is None  # nc=2
    assert m.request(request(client.header(nc=5))) is None
    replay = m.request(request(client.header(nc=5)))
    assert replay is not None and b"stale" not in replay.lines
    stale = m.request(request(client.header(nc=3)))
    assert stale is not None and b'stale="true", algorithm="MD5"' in stale.lines
    assert m.request(request(client.header(nc=6))) is None
    forged = client.header(nonce="AAAAAAAAAAAAAAAA")
    assert m.request(request(forged)) is not None


def test_digest_wrong_password_opaque_algorithm_qop_uri():
    m = build_digest(users=[DIGEST_TEST])
    assert login(m, DigestClient("test", "wrong")) is not None
    for override in ({"opaque": "other"}, {"algorithm": "SHA-256"}, {"qop": "auth-int"}):
        client = DigestClient("test", "test")
        assert login(m, client, **override) is not None, override
    # The uri signed for another path is refused; a path prefix of the request's is
    # taken (go-http-auth's leniency), and the request-target itself always is.
    assert login(m, DigestClient("test", "test"), b"/a/b", uri="/other") is not None
    assert login(m, DigestClient("test", "test"), b"/a/b?q", uri="/a") is None
    assert login(m, DigestClient("test", "test"), b"/a", uri="/a/b") is not None
    assert login(m, DigestClient("test", "test"), b"/a?q=1", uri="/a?q=1") is None


def test_digest_unknown_user_with_an_empty_ha1_is_refused():
    """go-http-auth checks an unknown user's response against an empty HA1, which a
    client can compute without any password: edge refuses the unknown user."""
    m = build_digest(users=[DIGEST_TEST])
    first = m.request(request([]))
    assert first is not None
    client = DigestClient("nobody", "")
    client.read(first)
    c = {k.decode(): v.decode() for k, v in client.challenge.items()}
    forged = md5(f":{c['nonce']}:00000001:0a4f113b:auth:{md5('GET:/')}")
    assert m.request(request(client.header(response=forged))) is not None


def test_digest_nonces_are_bounded():
    m = build_digest(users=[DIGEST_TEST])
    for _ in range(1500):
        m.request(request([]))
    assert len(m.nonces) <= 1101


def test_digest_params_as_go_http_auth_parses_them():
    assert digest_params(b'username="a, b", realm=r, nc=00000001, flag, quoted="x\\"y"') == {
        b"username": b"a, b",
        b"realm": b"r",
        b"nc": b"00000001",
        b"flag": b"",
        b"quoted": b'x"y',
    }


def test_from_config_builds_both():
    from edge.http.middlewares.builtin import from_config

    basic_config = msgspec.convert({"basicAuth": {"users": [APR1_TEST]}}, MiddlewareConfig)
    assert isinstance(from_config("b@file", basic_config), BasicAuth)
    digest_config = msgspec.convert({"digestAuth": {"users": [DIGEST_TEST]}}, MiddlewareConfig)
    assert isinstance(from_config("d@file", digest_config), DigestAuth)
