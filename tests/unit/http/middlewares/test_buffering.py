"""buffering's spool: memory first, then a file, refused past its limit; read back
whole; and the kinds its disable*Buffer keys build."""

from __future__ import annotations

import msgspec
import pytest

from edge.config.dynamic import Buffering as BufferingConfig
from edge.config.dynamic import Middleware as MiddlewareConfig
from edge.http.codec import RequestHead
from edge.http.middlewares import BodyTooLarge, Forward, Middleware, Pipeline, Reply
from edge.http.middlewares.buffering import (
    DEFAULT_MEM,
    Buffering,
    RequestBuffering,
    ResponseBuffering,
    Spool,
    buffering,
)


def test_memory_then_a_file():
    spool = Spool(0, 10)
    assert spool.write(b"abcd") and spool.write(b"efgh")
    assert spool.file is None
    assert spool.write(b"ijkl")  # past 10 bytes: the file from here
    assert spool.file is not None and spool.parts == [b"abcd", b"efgh"]
    assert spool.write(b"x" * 100_000)
    assert spool.read() == b"abcdefghijkl" + b"x" * 100_000
    assert spool.file is None  # read through: closed


def test_the_limit_and_the_default_memory():
    spool = Spool(8, 0)
    assert spool.mem == DEFAULT_MEM
    assert spool.write(b"12345678") and not spool.write(b"9")
    assert Spool(-1, 0).write(b"x" * 10_000)  # no limit


def test_the_middleware_refuses_a_declared_length_and_holds_the_rest():
    mw = Buffering("b", max_request=10)
    from edge.http.codec import RequestHead

    big = RequestHead(b"POST", b"/", b"1.1", [], True, False, 11, False, False)
    fwd = Forward("a.test", b"/", b"", head=big)
    answer = mw.request(fwd)
    assert answer is not None and answer.status == 413 and fwd.spool is None
    small = RequestHead(b"POST", b"/", b"1.1", [], True, False, 10, False, False)
    fwd = Forward("a.test", b"/", b"", head=small)
    assert mw.request(fwd) is None and isinstance(fwd.spool, Spool)
    reply = Reply(200, b"OK", [], None)
    held = Buffering("b", max_response=5).response(fwd, reply)
    assert reply.hold and held is not None
    assert held.data(b"12345") == b""
    with pytest.raises(BodyTooLarge):
        held.data(b"6")


def test_negative_sizes_name_their_key():
    model = MiddlewareConfig(buffering=BufferingConfig(mem_response_body_bytes=-1))
    assert model.check() == ["buffering.memResponseBodyBytes: -1 is negative"]


def _kind(**config: object) -> Middleware:
    return buffering("b", msgspec.convert(config, BufferingConfig))


def test_disabled_buffers_leave_that_body_streaming():
    """disableRequestBuffer / disableResponseBuffer (oxy's options): the body not
    held streams with no limit; without the response held no retryExpression runs;
    both off, the middleware does nothing and the route keeps the express path."""
    big = RequestHead(b"POST", b"/", b"1.1", [], True, False, 11, False, False)
    both = _kind(maxRequestBodyBytes=10)
    assert isinstance(both, Buffering)
    requests = _kind(
        disableResponseBuffer=True, maxRequestBodyBytes=10, retryExpression="IsNetworkError()"
    )
    assert type(requests) is RequestBuffering
    fwd = Forward("a.test", b"/", b"", head=big)
    answer = requests.request(fwd)
    assert answer is not None and answer.status == 413  # its limit still holds
    small = Forward(
        "a.test",
        b"/",
        b"",
        head=RequestHead(b"POST", b"/", b"1.1", [], True, False, 3, False, False),
    )
    assert requests.request(small) is None and small.spool is not None and small.replay is None
    assert not Pipeline([requests]).responders  # the response streams
    responses = _kind(
        disableRequestBuffer=True, maxRequestBodyBytes=10, retryExpression="Attempts() < 2"
    )
    assert type(responses) is ResponseBuffering
    fwd = Forward("a.test", b"/", b"", head=big)
    assert responses.request(fwd) is None and fwd.spool is None  # no limit, not held
    assert fwd.replay is not None and fwd.replay(1, 200, b"GET")
    assert Pipeline([responses]).responders
    neither = _kind(disableRequestBuffer=True, disableResponseBuffer=True)
    assert Pipeline([neither]).empty
