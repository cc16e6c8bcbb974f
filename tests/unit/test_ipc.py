"""Supervisor <-> worker messages: framing, encoding, and what a broken peer gets."""

from __future__ import annotations

import msgspec
import pytest

from edge.config.durations import Duration
from edge.config.loader import decode_dynamic, decode_static
from edge.config.merge import merge
from edge.ipc import (
    HEADER,
    Ack,
    Apply,
    FrameDecoder,
    IPCError,
    Origins,
    Ready,
    Start,
    Started,
    ToSupervisor,
    ToWorker,
    Unopened,
    encode,
)


def _configuration():
    conf = decode_dynamic(
        {
            "http": {
                "routers": {
                    "a": {
                        "rule": "Host(`a.test`) && PathPrefix(`/x`)",
                        "service": "s",
                        "middlewares": ["strip"],
                    }
                },
                "services": {
                    "s": {
                        "loadBalancer": {
                            "servers": [{"url": "http://127.0.0.1:8001", "weight": 3}],
                            "serversTransport": "t",
                        }
                    }
                },
                "middlewares": {"strip": {"stripPrefix": {"prefixes": ["/x"]}}},
                "serversTransports": {
                    "t": {
                        "forwardingTimeouts": {"dialTimeout": "1m30s", "idleConnTimeout": "250ms"}
                    }
                },
            }
        }
    )
    return merge({"file": conf})


def _static():
    return decode_static(
        {
            "entryPoints": {
                "web": {
                    "address": "127.0.0.1:8000",
                    "transport": {"lifeCycle": {"graceTimeOut": "3s"}},
                },
                "dns": {"address": ":5353/udp"},
            },
            "ping": {},
            "log": {"level": "warning", "format": "json"},
            "accessLog": {"bufferingSize": 10},
            "providersThrottleDuration": "100ms",
            "workers": 4,
        }
    )


MESSAGES = [
    Start(worker_id=1, static=_static(), parser="h11"),
    Apply(generation=7, configuration=_configuration()),
    Ready(generation=7),
    Started(worker_id=2, pid=4242),
    Ack(generation=7, worker_id=2),
    Unopened(worker_id=2, errors={":8443": "Address already in use"}),
    Origins(origins={"kubernetesgateway": {":8443": ["Gateway default/gw listener https"]}}),
]


def test_round_trip_every_message():
    decoder = FrameDecoder()
    assert decoder.feed(b"".join(encode(m) for m in MESSAGES)) == MESSAGES
    assert decoder.buffered == 0


def test_durations_come_back_as_durations():
    (start, apply_) = FrameDecoder().feed(encode(MESSAGES[0]) + encode(MESSAGES[1]))
    grace = start.static.entry_points["web"].transport.life_cycle.grace_time_out
    assert isinstance(grace, Duration) and grace == 3.0
    timeouts = apply_.configuration.http.servers_transports["t@file"].forwarding_timeouts
    assert isinstance(timeouts.dial_timeout, Duration) and timeouts.dial_timeout == 90.0
    assert timeouts.idle_conn_timeout == 0.25
    assert start.static.log.level == "WARN" and start.static.workers == 4
    assert start.static.entry_points["traefik"].address == ":8080"  # added by the model, kept


def test_frame_is_length_prefixed():
    frame = encode(Ready(generation=1))
    (size,) = HEADER.unpack_from(frame)
    assert size == len(frame) - HEADER.size
    assert msgspec.msgpack.decode(frame[HEADER.size :]) == {"type": "ready", "generation": 1}


def test_any_split_point():
    data = b"".join(encode(m) for m in MESSAGES)
    for cut in range(len(data) + 1):
        decoder = FrameDecoder()
        out = decoder.feed(data[:cut]) + decoder.feed(data[cut:])
        assert out == MESSAGES, cut
        assert decoder.buffered == 0


def test_byte_by_byte():
    data = encode(MESSAGES[1]) + encode(MESSAGES[4])
    decoder = FrameDecoder()
    out = []
    for i in range(len(data)):
        out += decoder.feed(data[i : i + 1])
    assert out == [MESSAGES[1], MESSAGES[4]]


def test_direction_decoders():
    assert FrameDecoder(ToWorker).feed(encode(MESSAGES[2])) == [MESSAGES[2]]
    assert FrameDecoder(ToSupervisor).feed(encode(MESSAGES[4])) == [MESSAGES[4]]
    with pytest.raises(IPCError, match="undecodable"):
        FrameDecoder(ToWorker).feed(encode(MESSAGES[4]))  # an Ack is not for a worker
    assert FrameDecoder(ToSupervisor).feed(encode(MESSAGES[5])) == [MESSAGES[5]]
    assert FrameDecoder(ToWorker).feed(encode(MESSAGES[6])) == [MESSAGES[6]]


def test_oversized_frame_refused_before_it_arrives():
    decoder = FrameDecoder(max_frame=1024)
    with pytest.raises(IPCError, match="exceeds"):
        decoder.feed(HEADER.pack(1025))


def test_garbage_payload():
    payload = b"\xc1not msgpack"
    with pytest.raises(IPCError, match="undecodable"):
        FrameDecoder().feed(HEADER.pack(len(payload)) + payload)


def test_invalid_configuration_refused():
    # A frame whose configuration would not validate is refused as a whole.
    bad = msgspec.msgpack.encode(
        {
            "type": "apply",
            "generation": 1,
            "configuration": {"http": {"routers": {"a": {"rule": 3}}}},
        }
    )
    with pytest.raises(IPCError):
        FrameDecoder().feed(HEADER.pack(len(bad)) + bad)


def test_decoder_keeps_working_after_partial_frames():
    decoder = FrameDecoder()
    frame = encode(MESSAGES[3])
    assert decoder.feed(frame[:2]) == []
    assert decoder.feed(frame[2:] + frame[:5]) == [MESSAGES[3]]
    assert decoder.feed(frame[5:]) == [MESSAGES[3]]
