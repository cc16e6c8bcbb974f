"""HTTP/2's sans-IO side (edge.http.codec.h2): request heads from header lists, the
refusals that keep an HTTP/1.1 request line intact, response header lists, the
server connection's settings and the per-second allowances."""

from __future__ import annotations

import random

import h2.config
import h2.connection
import h2.events
import hpack
import pytest
from h2.settings import SettingCodes

from edge.errors import ProtocolError
from edge.http.codec import ResponseHead
from edge.http.codec.h2 import (
    PREFACE,
    STREAM_WINDOW,
    Allowance,
    RememberingDecoder,
    RememberingEncoder,
    RequestHeads,
    ResponseLists,
    request_head,
    response_headers,
    server_connection,
    trailers,
)
from edge.http.codec.parsers import parser_classes

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


def test_split_cookie_fields_are_joined_into_one_last():
    headers = [*GET[:4], (b"cookie", b"a=1"), (b"accept", b"*/*"), (b"cookie", b"b=2")]
    head = request_head(headers, end_stream=True)
    assert head.headers == [(b"accept", b"*/*"), (b"cookie", b"a=1; b=2")]


def test_a_cookie_piece_is_checked_as_a_field():
    with pytest.raises(ProtocolError, match="invalid value of cookie"):
        request_head([*GET[:4], (b"cookie", b"a=1"), (b"cookie", b"b=\x00")], end_stream=True)


def test_the_same_header_list_is_the_same_head_again():
    heads = RequestHeads()
    first = heads.head_of(list(GET), end_stream=True)
    assert heads.head_of(list(GET), end_stream=True) is first
    with_body = heads.head_of(list(GET), end_stream=False)
    assert with_body is not first and with_body.chunked and not first.chunked
    other = heads.head_of([*GET[:3], (b":path", b"/other")], end_stream=False)
    assert other.target == b"/other"


def test_a_refused_header_list_is_refused_every_time():
    heads = RequestHeads()
    bad = [*GET, (b"connection", b"close")]
    for _ in range(2):
        with pytest.raises(ProtocolError, match="connection-specific"):
            heads.head_of(bad, end_stream=True)
    assert heads.head_of(list(GET), end_stream=True).target == b"/a/b?c=d"
    with pytest.raises(ProtocolError, match="connection-specific"):
        heads.head_of(bad, end_stream=True)


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


def parsed(raw: bytes) -> ResponseHead:
    """The head of ``raw`` as a response parser gives it."""
    heads: list[ResponseHead] = []

    class Handler:
        def on_head(self, head: ResponseHead) -> None:
            heads.append(head)

        def on_body(self, data: bytes) -> None: ...
        def on_end(self) -> None: ...

    parser = parser_classes("httptools")[1](Handler())
    parser.expect(b"GET")
    parser.feed(raw)
    return heads[0]


def test_a_head_of_the_same_bytes_is_the_same_list_again():
    lists = ResponseLists()
    raw = b"HTTP/1.1 200 OK\r\nServer: t\r\nContent-Length: 0\r\n\r\n"
    first = lists.of(parsed(raw))
    assert first == [(b":status", b"200"), (b"server", b"t"), (b"content-length", b"0")]
    assert lists.of(parsed(raw)) is first
    other = lists.of(parsed(raw.replace(b"200 OK", b"404 Not Found")))
    assert other[0] == (b":status", b"404")
    assert lists.of(parsed(raw)) == first


def test_a_head_without_its_bytes_is_listed_each_time():
    lists = ResponseLists()
    made = [ResponseHead(s, b"", b"1.1", [(b"X", b"1")], True, False, 0, False) for s in (200, 500)]
    assert [lists.of(head)[0] for head in made] == [(b":status", b"200"), (b":status", b"500")]


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


FIELDS = [
    (b":status", b"200"),
    (b"server", b"nginx"),
    (b"content-type", b"text/plain"),
    (b"x-a", b"1"),
    (b"x-b", b"2"),
    (b"x-big", b"z" * 300),
]


def header_lists(seed: int, count: int) -> list[list[tuple[bytes, bytes]]]:
    """Header lists that repeat, change one field, or grow: the table is filled,
    evicted (a small table), and the same list comes again against another table."""
    rng = random.Random(seed)
    lists = []
    for _ in range(count):
        fields = rng.sample(FIELDS[1:], rng.randint(0, 4))
        if rng.random() < 0.3:
            fields.append((b"x-n", b"%d" % rng.randint(0, 3)))
        lists.append([FIELDS[0], *fields])
        if rng.random() < 0.5:
            lists.append(lists[-1])  # the same list again
    return lists


@pytest.mark.parametrize("table_size", [4096, 200, 0])
def test_the_remembering_encoder_codes_as_hpacks_would(table_size):
    """Byte for byte, through repeats, table changes, evictions and resizes."""
    plain, remembering = hpack.Encoder(), RememberingEncoder()
    for i, fields in enumerate(header_lists(table_size, 400)):
        if i == 150:
            plain.header_table_size = remembering.header_table_size = table_size
        assert remembering.encode(fields) == plain.encode(fields), i


def test_the_remembering_encoder_gives_the_last_block_for_the_same_list():
    encoder, decoder = RememberingEncoder(), hpack.Decoder()
    decoder.decode(encoder.encode(FIELDS), raw=True)  # the fields enter the table
    indexed = encoder.encode(FIELDS)
    assert encoder.encode(list(FIELDS)) is indexed
    decoder.decode(encoder.encode([(b"x-other", b"1")]), raw=True)  # indexes move
    moved = encoder.encode(FIELDS)
    assert moved != indexed
    assert decoder.decode(moved, raw=True) == FIELDS


@pytest.mark.parametrize("table_size", [4096, 200, 0])
def test_the_remembering_decoder_decodes_as_hpacks_would(table_size):
    encoder = hpack.Encoder()
    plain, remembering = hpack.Decoder(), RememberingDecoder()
    for i, fields in enumerate(header_lists(table_size + 1, 400)):
        if i == 150:
            encoder.header_table_size = table_size  # a size update in the next block
        block = encoder.encode(fields)
        assert remembering.decode(block, raw=True) == plain.decode(block, raw=True) == fields, i


def test_the_same_block_against_a_changed_table_is_decoded_again():
    encoder, decoder = hpack.Encoder(), RememberingDecoder()
    decoder.decode(encoder.encode(FIELDS), raw=True)
    indexed = encoder.encode(FIELDS)  # every field an index into the dynamic table
    assert decoder.decode(indexed, raw=True) == FIELDS
    assert decoder.decode(indexed, raw=True) == FIELDS  # remembered
    decoder.decode(encoder.encode([(b"x-other", b"1")]), raw=True)  # one entry in front
    shifted = decoder.decode(indexed, raw=True)
    assert shifted != FIELDS and shifted[0] == FIELDS[0]  # the static :status stays


def test_a_remembered_header_list_is_bounded_as_a_decoded_one():
    encoder, decoder = hpack.Encoder(), RememberingDecoder()
    decoder.decode(encoder.encode(FIELDS), raw=True)
    indexed = encoder.encode(FIELDS)
    decoder.decode(indexed, raw=True)
    decoder.max_header_list_size = 300  # under the list's size (SETTINGS changed)
    with pytest.raises(hpack.OversizedHeaderListError):
        decoder.decode(indexed, raw=True)


def test_a_remembered_header_list_is_a_copy():
    encoder, decoder = hpack.Encoder(), RememberingDecoder()
    decoder.decode(encoder.encode(FIELDS), raw=True)
    indexed = encoder.encode(FIELDS)
    decoder.decode(indexed, raw=True).append((b"x-added", b"1"))
    assert decoder.decode(indexed, raw=True) == FIELDS
    assert decoder.decode(indexed, raw=True) == FIELDS


def test_the_server_connection_codes_with_the_remembering_hpack():
    server = server_connection(
        max_concurrent_streams=10, decoder_table_size=4096, max_header_list_size=8192
    )
    assert isinstance(server.encoder, RememberingEncoder)
    assert isinstance(server.decoder, RememberingDecoder)
    assert server.decoder.max_header_list_size == 8192
