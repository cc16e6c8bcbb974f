"""Host handling: the one normalisation of a Host header / ``:authority`` value, and the
one-label wildcard key that covers a host name.

Every place that compares hosts (the Host and HostSNI matchers, :class:`RouteTable`'s
index, the HTTP server's routing, the forwarding of Host) goes through these, so a host
reads the same wherever it is looked at.
"""

from __future__ import annotations


def split_authority(authority: str) -> tuple[str, str]:
    """(host, port) of a Host header / :authority value: the one host normalisation.

    The host as ``RequestView.host`` expects it: port and IPv6 brackets gone, one
    trailing dot dropped, lowercased (``"Example.COM.:8080"`` -> ``("example.com",
    "8080")``, ``"[::1]:80"`` -> ``("::1", "80")``); an unbracketed value with
    several colons is an IPv6 address without a port (``"::1"``).
    """
    host = authority.strip()
    port = ""
    if host.startswith("["):
        end = host.find("]")
        if end != -1:
            if host[end + 1 : end + 2] == ":":
                port = host[end + 2 :]
            host = host[1:end]
    elif host.count(":") == 1:
        host, port = host.split(":")
    if host.endswith("."):
        host = host[:-1]
    return host.lower(), port


def canonical_host(authority: str) -> str:
    """The host of a Host header / :authority value (see :func:`split_authority`)."""
    return split_authority(authority)[0]


def wildcard_of(host: str) -> str | None:
    """The wildcard key that covers ``host``: ``a.b.com`` -> ``*.b.com``; None without a
    dot, or when the first label is empty (``.b.com``).

    Traefik's one-label wildcard: ``*.b.com`` matches ``a.b.com``, not ``b.com`` nor
    ``x.a.b.com``; the label is never empty (Traefik's own matcher takes ``.b.com``).
    """
    dot = host.find(".")
    return None if dot <= 0 else "*" + host[dot:]
