"""edge.udp.server without sockets: the PROXY v2 header it sends upstream and the
IP_PKTINFO / IPV6_PKTINFO ancillary data it reads the local address from."""

from __future__ import annotations

import socket
import struct

import pytest

from edge.udp.server import IP_PKTINFO, local_from_pktinfo, proxy_v2_header


def test_proxy_v2_header_ipv4():
    header = proxy_v2_header(("192.0.2.1", 5000), ("198.51.100.7", 53))
    assert header[:12] == b"\r\n\r\n\x00\r\nQUIT\n"
    assert header[12:16] == b"\x21\x12\x00\x0c"  # v2 PROXY, UDP over IPv4, 12 bytes
    assert header[16:] == socket.inet_aton("192.0.2.1") + socket.inet_aton(
        "198.51.100.7"
    ) + struct.pack("!HH", 5000, 53)


def test_proxy_v2_header_unmaps_dual_stack_addresses():
    assert proxy_v2_header(("::ffff:192.0.2.1", 5000, 0, 0), ("::ffff:127.0.0.2", 53, 0, 0)) == (
        proxy_v2_header(("192.0.2.1", 5000), ("127.0.0.2", 53))
    )


def test_proxy_v2_header_ipv6():
    header = proxy_v2_header(("2001:db8::1", 5000, 0, 0), ("2001:db8::2", 53, 0, 0))
    assert header[12:16] == b"\x21\x22\x00\x24"  # UDP over IPv6, 36 bytes
    assert header[16:32] == socket.inet_pton(socket.AF_INET6, "2001:db8::1")
    assert header[48:] == struct.pack("!HH", 5000, 53)
    assert len(header) == 16 + 36


def test_pktinfo_ipv6_and_mapped():
    data = socket.inet_pton(socket.AF_INET6, "::ffff:127.0.0.2") + struct.pack("=I", 1)
    local, reply = local_from_pktinfo([(socket.IPPROTO_IPV6, socket.IPV6_PKTINFO, data)], 53)
    assert local == ("::ffff:127.0.0.2", 53)
    assert reply == [
        (socket.IPPROTO_IPV6, socket.IPV6_PKTINFO, data[:16] + bytes(4))
    ]  # no interface
    link = socket.inet_pton(socket.AF_INET6, "fe80::1") + struct.pack("=I", 7)
    _, reply = local_from_pktinfo([(socket.IPPROTO_IPV6, socket.IPV6_PKTINFO, link)], 53)
    assert reply[0][2] == link  # a link-local source keeps its interface


@pytest.mark.skipif(IP_PKTINFO is None, reason="IP_PKTINFO is not available on this platform")
def test_pktinfo_ipv4():
    data = struct.pack("=I", 2) + socket.inet_aton("10.0.0.1") + socket.inet_aton("10.0.0.9")
    local, reply = local_from_pktinfo([(socket.IPPROTO_IP, IP_PKTINFO, data)], 53)
    assert local == ("10.0.0.9", 53)  # ipi_addr: where the client wrote
    assert reply == [  # from ipi_spec_dst: the local address (differs for a broadcast)
        (socket.IPPROTO_IP, IP_PKTINFO, bytes(4) + socket.inet_aton("10.0.0.1") + bytes(4))
    ]
    assert local_from_pktinfo([], 53) == (None, None)
