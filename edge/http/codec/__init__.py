"""Sans-IO HTTP/1.1: the codecs and the pure functions over heads and bytes.

Nothing here touches a socket or the loop; every object is fed bytes and calls
back (or returns) synchronously, so each is testable without either.

- :mod:`~edge.http.codec.base`: the interface both codecs implement (heads,
  handler events, parser protocols), re-exported here as the package's API.
- :mod:`~edge.http.codec.httptools` (llhttp, the default) and
  :mod:`~edge.http.codec.h11` (the strict reference): the two implementations;
  :mod:`~edge.http.codec.parsers` picks one by name.
- :mod:`~edge.http.codec.headers`: the checks both codecs share, so that they
  accept and refuse the same bytes.
- :mod:`~edge.http.codec.forward`: the head writers (what goes to the next hop,
  what goes back to the client).

Imports go one way: ``base`` needs only ``headers``; the implementations,
``parsers`` and ``forward`` build on ``base``; the server
(:mod:`edge.http.server`) builds on all of them.
"""

from edge.http.codec.base import (
    Handler,
    Header,
    QuickRequestHead,
    QuickResponseHead,
    RequestHead,
    RequestParser,
    ResponseHead,
    ResponseParser,
)

__all__ = [
    "Handler",
    "Header",
    "QuickRequestHead",
    "QuickResponseHead",
    "RequestHead",
    "RequestParser",
    "ResponseHead",
    "ResponseParser",
]
