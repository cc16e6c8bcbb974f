"""The HTTP server: a client connection, its exchanges, and the upstream connections they use.

- :mod:`~edge.http.server.connection`: :class:`HTTPConnection`, the asyncio
  protocol of a client connection (bytes in and out, flow control, deadlines).
- :mod:`~edge.http.server.exchange`: one request, from its head to the end of its
  response (routing, the middleware pipeline, the upstream side).
- :mod:`~edge.http.server.upstream`: the protocol of a connection to an upstream
  server, pooled by :mod:`edge.transports`.

This layer sits above the router (which it asks for a route) and the TCP splice
(which it hands an upgraded connection to), and below the entrypoints, which make
its connections. The sans-IO parts it drives are in :mod:`edge.http.codec`.
"""
