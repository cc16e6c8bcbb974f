"""HTTP/2's sans-IO side (edge.http.codec.h2): request heads from header lists, the
refusals that keep an HTTP/1.1 request line intact, response header lists, the
server connection's settings and the per-second allowances."""

from __future__ import annotations

import h2.config
import h2.connection
import h2.events
import pytest
from h2.settings import SettingCodes

from edge.errors import ProtocolError
from edge.http.codec import ResponseHead
from edge.http.codec.h2 import (
    PREFACE,
    STREAM_WINDOW,
    Allowance,
    request_head,
    response_headers,
    server_connection,
    trailers,
)

GET = [
    (b":method", b"GET"),
    (b":scheme", b"https"),
    (b":authority", b"app.example:8443"),
    (b":path", b"/a/b?c=d"),
    (b"accept", b"*/*"),
    (b"cookie", b"a=1; b=2"),
]


def test_a_get_is_the_head_an_http_1_1_client_would_have_sent():
    head = request_head(GET, end_stream=True)
    assert (head.method, head.target, head.version, head.host) == (
        b"GET",
        b"/a/b?c=d",
        b"2.0",
        b"app.example:8443",
    )
    assert head.headers == [(b"accept", b"*/*"), (b"cookie", b"a=1; b=2")]
    assert head.keep_alive and not head.chunked and head.content_length is None
    assert not head.upgrade and not head.expect_continue
    assert head.passthrough is None  # rebuilt for the upstream, never forwarded as bytes


def test_host_stands_in_for_a_missing_authority_and_is_no_field():
    headers = [h for h in GET if h[0] != b":authority"] + [(b"host", b"h.example")]
    head = request_head(headers, end_stream=True)
    assert head.host == b"h.example"
    assert all(name != b"host" for name, _ in head.headers)


def test_a_body_without_a_length_goes_chunked_and_a_stated_one_as_it_is():
    post = [(b":method", b"POST"), *GET[1:]]
    streamed = request_head(post, end_stream=False)
    assert streamed.chunked and streamed.content_length is None
    sized = request_head([*post, (b"content-length", b"12")], end_stream=False)
    assert not sized.chunked and sized.content_length == 12
    empty = request_head([*post, (b"content-length", b"0")], end_stream=True)
    assert not empty.chunked and not empty.content_length


def test_expect_100_continue_counts_only_with_a_body():
    post = [(b":method", b"POST"), *GET[1:], (b"expect", b"100-Continue")]
    assert request_head(post, end_stream=False).expect_continue
    assert not request_head(post, end_stream=True).expect_continue


@pytest.mark.parametrize(
    ("name", "value", "why"),
    [
        (b":path", b"/a b", "invalid :path"),  # would split the HTTP/1.1 request line
        (b":path", b"/a\tb", "invalid :path"),
        (b":path", b"/\x7f", "invalid value of :path"),
        (b":path", b"a/b", "invalid :path"),  # not origin-form
        (b":path", b"http://x.example/", "invalid :path"),
        (b":method", b"GET /x HTTP/1.1\r\nX:", "invalid value of :method"),
        (b":method", b"G T", "invalid :method"),
        (b":method", b"CONNECT", "CONNECT"),
        (b":protocol", b"websocket", "extended CONNECT"),
        (b"content-length", b"-1", "invalid content-length"),
        (b"content-length", b"1e3", "invalid content-length"),
    ],
)
def test_what_would_not_be_the_same_request_in_http_1_1_is_refused(name, value, why):
    headers = [(n, value if n == name else v) for n, v in GET]
    if name not in dict(GET):
        headers.insert(0, (name, value))
    with pytest.raises(ProtocolError, match=why):
        request_head(headers, end_stream=True)


@pytest.mark.parametrize(
    ("fields", "why"),
    [
        ([(b"X-Up", b"1")], "invalid field name"),
        ([(b"x-a", b"1\r\nx-b: 2")], "invalid value of x-a"),
        ([(b"x-a", b"tab at the end\t")], "invalid value of x-a"),
        ([(b"connection", b"close")], "connection-specific field connection"),
        ([(b"te", b"trailers, deflate")], "connection-specific field te"),
        ([(b"host", b"a"), (b"host", b"a")], "two host fields"),
        ([(b"host", b"b.example")], "host is not the :authority"),
        ([(b":authority", b"x")], "repeated"),
        ([(b":status", b"200")], "in a request"),
    ],
)
def test_malformed_fields_are_refused_naming_them(fields, why):
    headers = [*GET[:4], *fields, *GET[4:]] if fields[0][0][:1] == b":" else [*GET, *fields]
    with pytest.raises(ProtocolError, match=why):
        request_head(headers, end_stream=True)


def test_te_trailers_and_a_host_equal_to_the_authority_are_taken():
    head = request_head([*GET, (b"te", b"trailers"), (b"host", b"app.example:8443")], True)
    assert (b"te", b"trailers") in head.headers and head.host == b"app.example:8443"
    assert (b"te", b"Trailers") in request_head([*GET, (b"te", b"Trailers")], True).headers


def test_trailers_are_checked_as_fields_and_hold_no_pseudo_header():
    fields = [(b"grpc-status", b"0"), (b"x-sum", b"12")]
    assert trailers(fields) == fields
    for bad in ([(b":path", b"/")], [(b"X-Sum", b"1")], [(b"transfer-encoding", b"chunked")]):
        with pytest.raises(ProtocolError):
            trailers(bad)


def test_two_content_lengths_must_agree():
    post = [(b":method", b"POST"), *GET[1:], (b"content-length", b"3")]
    assert request_head([*post, (b"content-length", b"3")], end_stream=False).content_length == 3
    with pytest.raises(ProtocolError, match="content-length"):
        request_head([*post, (b"content-length", b"4")], end_stream=False)


def test_options_star_is_a_target():
    head = request_head([(b":method", b"OPTIONS"), *GET[1:3], (b":path", b"*")], end_stream=True)
    assert head.target == b"*"


def test_a_request_without_an_authority_or_a_method_is_refused():
    with pytest.raises(ProtocolError, match="authority"):
        request_head([h for h in GET if h[0] != b":authority"], end_stream=True)
    with pytest.raises(ProtocolError, match=":method"):
        request_head(GET[1:], end_stream=True)


def test_response_headers_lowercase_and_without_connection_specific_fields():
    head = ResponseHead(
        200,
        b"OK",
        b"1.1",
        [
            (b"Content-Type", b"text/plain"),
            (b"Connection", b"close"),
            (b"Keep-Alive", b"timeout=5"),
            (b"Transfer-Encoding", b"chunked"),
            (b"Upgrade", b"h2c"),
            (b"Proxy-Connection", b"keep-alive"),
            (b"Set-Cookie", b"a=1"),
            (b"Set-Cookie", b"b=2"),
        ],
        False,
        False,
        None,
        True,
    )
    assert response_headers(head) == [
        (b":status", b"200"),
        (b"content-type", b"text/plain"),
        (b"set-cookie", b"a=1"),
        (b"set-cookie", b"b=2"),
    ]


def client() -> h2.connection.H2Connection:
    c = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
    c.initiate_connection()
    return c


def test_the_server_connection_says_its_limits_and_opens_the_connection_window():
    server = server_connection(
        max_concurrent_streams=7, decoder_table_size=1024, max_header_list_size=8192
    )
    c = client()
    server.receive_data(c.data_to_send())
    events = c.receive_data(server.data_to_send())
    changed = next(e for e in events if isinstance(e, h2.events.RemoteSettingsChanged))
    settings = {code: s.new_value for code, s in changed.changed_settings.items()}
    assert settings[SettingCodes.MAX_CONCURRENT_STREAMS] == 7
    assert settings[SettingCodes.HEADER_TABLE_SIZE] == 1024
    assert settings[SettingCodes.MAX_HEADER_LIST_SIZE] == 8192
    window = next(e for e in events if isinstance(e, h2.events.WindowUpdated))
    assert window.stream_id == 0 and window.delta == 7 * STREAM_WINDOW - STREAM_WINDOW
    assert c.outbound_flow_control_window == 7 * STREAM_WINDOW


def test_the_header_list_bound_holds_before_the_client_acknowledges_it():
    server = server_connection(
        max_concurrent_streams=10, decoder_table_size=4096, max_header_list_size=1000
    )
    c = client()
    c.send_headers(1, [*GET, (b"x-big", b"y" * 2000)], end_stream=True)
    with pytest.raises(h2.exceptions.DenialOfServiceError):
        server.receive_data(c.data_to_send())  # the client's SETTINGS ACK never came


def test_the_preface_is_rfc_9113s():
    assert PREFACE == b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" and len(PREFACE) == 24


def test_an_allowance_holds_per_second():
    a = Allowance(3)
    assert [a.spend(10.0) for _ in range(4)] == [True, True, True, False]
    assert a.spend(10.9) is False  # the same second
    assert a.spend(11.0) is True  # a new one
