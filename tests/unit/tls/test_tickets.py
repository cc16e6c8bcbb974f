"""edge.tls.tickets: one session-ticket key installed in several server contexts."""

from __future__ import annotations

import ssl

import pytest

from edge.tls import tickets
from tests.fixtures.tls.pki import PKI


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> tuple[str, str]:
    return PKI("tickets CA").issue("a.test").write(tmp_path_factory.mktemp("tickets"), "a")


def server(files: tuple[str, str], key: bytes | None) -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(*files)
    if key is not None:
        assert tickets.install(ctx, key)
    return ctx


CLIENT = ssl._create_unverified_context()  # a session resumes only from the context that made it


def connect(
    server_ctx: ssl.SSLContext, session: ssl.SSLSession | None
) -> tuple[ssl.SSLSession, bool]:
    """One TLS 1.3 connection over memory BIOs with a byte each way (the tickets come
    after the handshake); (the client's session, whether it resumed)."""
    client_ctx = CLIENT
    c_in, c_out, s_in, s_out = (ssl.MemoryBIO() for _ in range(4))
    client = client_ctx.wrap_bio(c_in, c_out, server_hostname="a.test", session=session)
    srv = server_ctx.wrap_bio(s_in, s_out, server_side=True)
    for _ in range(10):
        done = 0
        for side, outgoing, peer_in in ((client, c_out, s_in), (srv, s_out, c_in)):
            try:
                side.do_handshake()
                done += 1
            except ssl.SSLWantReadError:
                pass
            peer_in.write(outgoing.read())
        if done == 2:
            break
    else:
        raise AssertionError("handshake did not finish")
    client.write(b"x")
    s_in.write(c_out.read())
    assert srv.read() == b"x"
    srv.write(b"y")
    c_in.write(s_out.read())
    assert client.read() == b"y"
    return client.session, client.session_reused


def test_available_on_cpython():
    assert tickets.available()


def test_a_ticket_resumes_on_another_context_with_the_same_key(files):
    key = tickets.new_key()
    first, second = server(files, key), server(files, key)
    session, reused = connect(first, None)
    assert not reused
    assert connect(second, session)[1]
    assert connect(first, session)[1]


def test_without_a_shared_key_a_ticket_resumes_only_where_it_was_issued(files):
    # The control: OpenSSL's own keys differ per context (what edge had before).
    first, second = server(files, None), server(files, None)
    session, _ = connect(first, None)
    assert not connect(second, session)[1]
    assert connect(first, session)[1]


def test_another_key_does_not_resume(files):
    session, _ = connect(server(files, tickets.new_key()), None)
    assert not connect(server(files, tickets.new_key()), session)[1]


def test_a_key_of_the_wrong_size_is_refused(files):
    assert not tickets.install(server(files, None), b"short")


def test_keys_derived_for_different_options_do_not_resume_each_others_tickets(files):
    secret = tickets.new_key()
    assert tickets.derive(secret, "a", "x") == tickets.derive(secret, "a", "x")
    assert (
        len(
            {
                tickets.derive(secret, "a", "x"),
                tickets.derive(secret, "ax", ""),
                tickets.derive(secret, "b", "x"),
            }
        )
        == 3
    )
    assert tickets.derive(secret, "a") != tickets.derive(tickets.new_key(), "a")
    session, _ = connect(server(files, tickets.derive(secret, "open")), None)
    assert not connect(server(files, tickets.derive(secret, "mtls")), session)[1]
    assert connect(server(files, tickets.derive(secret, "open")), session)[1]
