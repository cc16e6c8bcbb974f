"""Who a request comes from, and whether it may pass: Traefik v3's ``ipStrategy``
(pkg/ip), its ``Checker`` and the ``ipAllowList`` middleware (and ``ipWhiteList``,
the deprecated name Traefik still reads).

The client address a strategy picks, as Traefik picks it:

* no ``ipStrategy``, or one with neither ``depth`` nor ``excludedIPs``: the
  connection's peer (:attr:`Forward.client_ip`; a trusted PROXY header's client);
* ``depth: n`` (n > 0, it wins over ``excludedIPs``): the n-th entry from the right
  of X-Forwarded-For, ``""`` when it has fewer entries;
* ``excludedIPs``: the first entry from the right of X-Forwarded-For that is not in
  the list, ``""`` when there is none;
* ``ipv6Subnet: n`` (peer and depth only): an IPv6 address becomes the first
  address of its ``/n``, so a client's addresses count as one.

X-Forwarded-For is what the middlewares see in Traefik: the client's header lines
joined with ", " when the entrypoint trusts it (``forwardedHeaders``), absent
otherwise (Traefik deletes it before any middleware runs), so an untrusted client
cannot choose its address.

Invariants: built once per configuration from checked values (a bad range or
strategy never gets here); per request a strategy reads one header at most and
the allow list's verdict for an address is remembered (up to
:data:`VERDICTS_KEPT` addresses, then forgotten at once).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable, Iterable

from edge.config.dynamic import IPStrategy as IPStrategyConfig
from edge.config.dynamic import ip_range
from edge.http.codec.forward import reason
from edge.http.middlewares import Answer, Forward, Middleware
from edge.rules import unmapped_network

__all__ = [
    "Checker",
    "IPAllowList",
    "Strategy",
    "forwarded_for",
    "ip_strategy",
]

Strategy = Callable[[Forward], str]
"""The client address of a request, as text (``""`` when the strategy finds none)."""

_Address = ipaddress.IPv4Address | ipaddress.IPv6Address

VERDICTS_KEPT = 4096


class Checker:
    """Traefik's ``ip.Checker``: IPs and CIDRs (as :func:`edge.config.dynamic.ip_range`
    reads them), and whether an address is among them. IPv4-mapped IPv6 on either
    side is the IPv4 address it maps, as Go compares them."""

    __slots__ = ("networks",)

    def __init__(self, entries: Iterable[str]) -> None:
        self.networks = tuple(unmapped_network(ip_range(entry)) for entry in entries)

    def contains(self, addr: str) -> bool:
        """Whether ``addr`` (an address, no port) is in the list; False for text that
        is not an address (Traefik: an error, which no caller lets through)."""
        ip = _address(addr)
        if ip is None:
            return False
        for net in self.networks:  # noqa: SIM110 (no generator per request)
            if ip in net:
                return True
        return False

    def authorized(self, addr: str) -> bool:
        """Traefik's ``IsAuthorized``: ``addr`` may carry a port (``host:port``,
        ``[v6]:port``), which is dropped first."""
        return self.contains(_split_host(addr))


def _address(text: str) -> _Address | None:
    if not text or "%" in text:  # Go's netip keeps a zone; no range holds one
        text = text.split("%", 1)[0]
        if not text:
            return None
    try:
        ip = ipaddress.ip_address(text)
    except ValueError:
        return None
    if ip.version == 6 and ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    return ip


def _split_host(addr: str) -> str:
    """Go's ``net.SplitHostPort`` host, or ``addr`` itself where it fails."""
    if addr.startswith("["):
        end = addr.find("]")
        if end > 0 and addr[end + 1 : end + 2] == ":" and ":" not in addr[end + 2 :]:
            return addr[1:end]
        return addr
    if addr.count(":") == 1:
        return addr.partition(":")[0]
    return addr


def forwarded_for(fwd: Forward) -> str:
    """X-Forwarded-For as Traefik's middlewares read it: the trusted client's lines
    joined with ", " (their order kept), ``""`` for a client not trusted."""
    head = fwd.trusted_head
    if head is None:
        return ""
    values = [v for n, v in head.headers if len(n) == 15 and n.lower() == b"x-forwarded-for"]
    return b", ".join(values).decode("latin-1") if values else ""


def _subnet(ip: str, bits: int) -> str:
    """Traefik's ``getIPv6SubnetIP``: the first address of ``ip``'s ``/bits`` when it
    is IPv6, else ``ip`` as it is."""
    try:
        addr = ipaddress.ip_address(ip.split("%", 1)[0])  # Go's Prefix drops a zone
        if addr.version != 6:
            return ip
        return str(ipaddress.IPv6Network((int(addr), bits), strict=False).network_address)
    except ValueError:  # not an address, or bits out of range
        return ip


def ip_strategy(config: IPStrategyConfig | None) -> Strategy:
    """The strategy ``config`` describes (Traefik's ``IPStrategy.Get``; checked values)."""
    if config is None:
        return _peer
    subnet = config.ipv6_subnet
    if config.depth > 0:
        depth = config.depth

        def by_depth(fwd: Forward) -> str:
            xffs = forwarded_for(fwd).split(",")
            if len(xffs) < depth:
                return ""
            ip = xffs[len(xffs) - depth].strip()
            return ip if subnet is None else _subnet(ip, subnet)

        return by_depth
    if config.excluded_ips:
        excluded = Checker(config.excluded_ips)

        def excluding(fwd: Forward) -> str:
            for entry in reversed(forwarded_for(fwd).split(",")):
                ip = entry.strip()
                if ip and not excluded.contains(ip):
                    return ip
            return ""

        return excluding
    if subnet is None:
        return _peer
    bits = subnet
    return lambda fwd: _subnet(fwd.client_ip, bits)


def _peer(fwd: Forward) -> str:
    return fwd.client_ip


class IPAllowList(Middleware):
    """Lets through requests whose client address (its ``ipStrategy``'s) is in
    ``sourceRange``; answers the others ``rejectStatusCode`` (403 by default) with
    the status text as body, as Traefik does."""

    __slots__ = ("checker", "refusal", "strategy", "verdicts")

    def __init__(
        self,
        name: str,
        source_range: Iterable[str],
        strategy: Strategy = _peer,
        reject_status_code: int = 0,
    ) -> None:
        super().__init__(name)
        self.checker = Checker(source_range)
        self.strategy = strategy
        status = reject_status_code or 403
        self.refusal = Answer(status, b"", reason(status))
        self.verdicts: dict[str, bool] = {}

    def request(self, fwd: Forward) -> Answer | None:
        ip = self.strategy(fwd)
        verdicts = self.verdicts
        allowed = verdicts.get(ip)
        if allowed is None:
            allowed = self.checker.authorized(ip)
            if len(verdicts) >= VERDICTS_KEPT:
                verdicts.clear()
            verdicts[ip] = allowed
        return None if allowed else self.refusal
