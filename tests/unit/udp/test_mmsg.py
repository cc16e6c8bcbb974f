"""edge.udp.mmsg without sockets: raw sockaddrs read back as addresses."""

from __future__ import annotations

import socket
import struct

from edge.udp.mmsg import address_of


def test_address_of_raw_sockaddrs():
    """sockaddr_in / sockaddr_in6 as the kernel writes them (port and flowinfo in network
    order, scope id in host order) read as the socket module's recvfrom gives them."""
    v4 = struct.pack("=H", socket.AF_INET) + struct.pack("!H", 5353)
    v4 += socket.inet_pton(socket.AF_INET, "192.0.2.7") + bytes(8)
    assert address_of(v4) == ("192.0.2.7", 5353)
    v6 = struct.pack("=H", socket.AF_INET6) + struct.pack("!HI", 53, 0x12345)
    v6 += socket.inet_pton(socket.AF_INET6, "fe80::1") + struct.pack("=I", 3)
    assert address_of(v6) == ("fe80::1", 53, 0x12345, 3)
    mapped = v6[:8] + socket.inet_pton(socket.AF_INET6, "::ffff:192.0.2.7") + bytes(4)
    assert address_of(mapped) == ("::ffff:192.0.2.7", 53, 0x12345, 0)
