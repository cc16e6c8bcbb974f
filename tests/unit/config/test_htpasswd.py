"""htpasswd and htdigest lines (edge.config.htpasswd): the formats go-http-auth
tells apart, checked against openssl's own hashes and Traefik's test vectors;
the tables Traefik's getUsers makes (file first, ``users`` winning); and the
refusals, each naming its key and line and never the hash."""

from __future__ import annotations

import base64
import hashlib
import shutil
import subprocess

import bcrypt
import pytest

from edge.config.htpasswd import basic_users, digest_users, hash_problem, md5_crypt, verify

APR1_TEST = "$apr1$H6uskkkW$IgXLP6ewTrSuBkTrqE8wj/"  # "test", Traefik's tests
APR1_TEST2 = "$apr1$d9hr9HBB$4HxwgUir3HP4EsggP/QNo0"  # "test2"
BCRYPT_TEST = "$2a$04$.8sTYfcxbSplCtoxt5TdJOgpBYkarKtZYsYfYxQ1edbYRuO1DNi0e"  # "test"
SHA_TEST = "{SHA}qUqP5cyxm6YcTAhz05Hph5gvu9M="  # "test"


# (password, hash): go-http-auth's MD5Crypt vectors and Traefik's
@pytest.mark.parametrize(
    ("password", "hashed"),
    [
        ("apache", "$apr1$J.w5a/..$IW9y6DR0oO/ADuhlMF5/X1"),
        ("pass", "$1$YeNsbWdH$wvOF8JdqsoiLix754LTW90"),
        ("topsecret", "$apr1$JI4wh3am$AmhephVqLTUyAVpFQeHZC0"),
        ("test", APR1_TEST),
        ("test2", APR1_TEST2),
        ("test", BCRYPT_TEST),
        ("test", SHA_TEST),
    ],
)
def test_verify_known_hashes(password, hashed):
    assert hash_problem(hashed) == ""
    assert verify(password.encode(), hashed)
    assert not verify(password.encode() + b"x", hashed)
    assert not verify(b"", hashed)


@pytest.mark.parametrize("magic", ["apr1", "1"])
@pytest.mark.parametrize(
    ("password", "salt"),
    [("", "abc"), ("x", "12345678"), ("h\u00e9llo w\u00f6rld", "s/.Z"), ("p" * 40, "salt")],
)
def test_md5_crypt_is_openssls(magic, password, salt):
    """openssl passwd writes the same MD5-crypt hash (lengths around a digest's 16
    bytes, an empty password, UTF-8)."""
    openssl = shutil.which("openssl")
    if openssl is None:
        pytest.skip("openssl is not installed")
    out = subprocess.run(
        [openssl, "passwd", f"-{magic}", "-salt", salt, password],
        capture_output=True,
        check=True,
        timeout=10,
    ).stdout.strip()
    assert md5_crypt(password.encode(), salt.encode(), f"${magic}$".encode()) == out
    assert verify(password.encode(), out.decode())


def test_bcrypt_prefixes_and_long_passwords():
    """Every prefix go-http-auth sends to bcrypt; past 72 bytes bcrypt reads no more
    (Go's bcrypt), where Python's refuses the password."""
    hashed = bcrypt.hashpw(b"a" * 72, bcrypt.gensalt(4)).decode()
    for prefix in ("$2a$", "$2b$", "$2x$", "$2y$"):
        assert verify(b"a" * 80, prefix + hashed[4:])
        assert not verify(b"a" * 71, prefix + hashed[4:])


def test_sha_hash_of_any_password():
    for password in (b"", b"secret", "p\u00e4ss".encode()):
        hashed = "{SHA}" + base64.b64encode(hashlib.sha1(password).digest()).decode()
        assert verify(password, hashed)


def test_basic_users_file_first_users_win(tmp_path):
    """Traefik's TestBasicAuthUsersFromFile: comments and blank lines skipped, lines
    trimmed, the file's users then ``users`` (a name in both: ``users``')."""
    f = tmp_path / "users"
    f.write_text(f"#Comment\n\n  test:{APR1_TEST}  \r\ntest2:{APR1_TEST2}\n")
    users = basic_users([f"test2:{SHA_TEST}"], str(f))
    assert users == {"test": APR1_TEST, "test2": SHA_TEST}


def test_users_file_relative_to_the_working_directory(tmp_path, monkeypatch):
    (tmp_path / "users").write_text(f"test:{APR1_TEST}\n")
    monkeypatch.chdir(tmp_path)
    assert basic_users([], "users") == {"test": APR1_TEST}
    with pytest.raises(ValueError) as exc:
        basic_users([], "missing")
    assert str(exc.value) == (
        "usersFile: 'missing' (a relative path, read from the working directory: "
        f"{tmp_path / 'missing'}): no such file"
    )
    with pytest.raises(ValueError) as exc:
        digest_users([], "missing")
    assert "(a relative path, read from the working directory: " in str(exc.value)
    absolute = str(tmp_path / "missing")
    with pytest.raises(ValueError) as exc:
        basic_users([], absolute)
    assert str(exc.value) == f"usersFile: {absolute!r}: no such file"


# (users, file content or None, the message)
BAD_BASIC = [
    (["test"], None, "users[0]: not an htpasswd line (name:hash)"),
    ([f"a:{APR1_TEST}", "b:c:d"], None, "users[1]: not an htpasswd line (name:hash)"),
    (["test:test"], None, "users[0]: user 'test': not a hash edge (or Traefik) can match"),
    (["u:$5$rounds$abc"], None, "users[0]: user 'u': unknown hash format $5$"),
    (["u:$6$salt$hash"], None, "users[0]: user 'u': unknown hash format $6$"),
    (["u:{SHA}short"], None, "users[0]: user 'u': malformed {{SHA}} hash"),
    (["u:$2y$10$tooshort"], None, "users[0]: user 'u': malformed bcrypt hash ($2y$"),
    (["u:$2y$99$" + "a" * 53], None, "users[0]: user 'u': malformed bcrypt hash"),
    (["u:$apr1$salt$short"], None, "users[0]: user 'u': malformed MD5-crypt hash ($apr1$"),
    (["u\x01:" + APR1_TEST], None, "users[0]: the user name holds a control character"),
    ([], f"ok:{APR1_TEST}\n# note\nbroken\n", "usersFile: line 3 of '{file}': not an htpasswd"),
    ([], "u:plaintext\n", "usersFile: line 1 of '{file}': user 'u': not a hash"),
    ([], "", "users: no user (users and usersFile give none)"),
    ([], "# only a comment\n", "users: no user"),
]


@pytest.mark.parametrize(("users", "content", "message"), BAD_BASIC)
def test_basic_users_refused_naming_key_and_line(tmp_path, users, content, message):
    path = ""
    if content is not None:
        path = str(tmp_path / "users")
        (tmp_path / "users").write_text(content)
    with pytest.raises(ValueError) as exc:
        basic_users(users, path)
    text = str(exc.value)
    assert text.startswith(message.format(file=path)), text
    for line in users + (content or "").splitlines():  # no hash, no password in the message
        secret = line.partition(":")[2]
        if len(secret) > 4:
            assert secret not in text


def test_digest_users_realm_key_and_refusals(tmp_path):
    """Traefik's TestDigestAuthUsersFromFile: ``name:realm:md5``; a name in several
    realms is several users; the HA1 is 32 hex digits (htdigest's)."""
    f = tmp_path / "digest"
    f.write_text(
        "test:traefik:a2688e031edb4be6a3797f3882655c05\n"
        "test:traefiker:A3D334DFF2645B914918DE78BEC50BF4\n"
    )
    assert digest_users(["test2:traefik:518845800f9e2bfb1f1f740ec24f074e"], str(f)) == {
        ("test", "traefik"): "a2688e031edb4be6a3797f3882655c05",
        ("test", "traefiker"): "a3d334dff2645b914918de78bec50bf4",
        ("test2", "traefik"): "518845800f9e2bfb1f1f740ec24f074e",
    }
    assert digest_users([], "") == {}
    with pytest.raises(ValueError, match=r"^users\[0\]: not an htdigest line"):
        digest_users(["test"], "")
    with pytest.raises(ValueError, match=r"^users\[0\]: user 'test': the hash is not 32 hex"):
        digest_users(["test:traefik:notahash"], "")
