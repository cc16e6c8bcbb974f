"""A small OpenTelemetry collector for the tests: OTLP/HTTP on 127.0.0.1, recording the
spans of every ``POST /v1/traces`` (JSON, gzipped or not), with the resource of each."""

from __future__ import annotations

import gzip
import json
import ssl
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class Collector:
    """``spans``: every span received, each with ``resource`` (its attributes as a dict)
    and ``attrs`` (its own, as a dict) added; ``posts``: the request heads, by post.
    ``delay``: seconds each answer waits (a slow collector); ``tls``: served over TLS
    with this context (``https://localhost:<port>``)."""

    def __init__(self, delay: float = 0.0, tls: ssl.SSLContext | None = None) -> None:
        self.delay = delay
        self.spans: list[dict[str, Any]] = []
        self.posts: list[dict[str, str]] = []
        self.cond = threading.Condition()
        collector = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                if self.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                if collector.delay:
                    time.sleep(collector.delay)
                collector.receive(self.path, dict(self.headers), json.loads(body))
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"{}")

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self.endpoint = f"http://127.0.0.1:{self.port}/v1/traces"
        if tls is not None:
            self.server.socket = tls.wrap_socket(self.server.socket, server_side=True)
            self.endpoint = f"https://localhost:{self.port}/v1/traces"
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.1,), daemon=True)
        self.thread.start()

    def receive(self, path: str, headers: dict[str, str], doc: dict[str, Any]) -> None:
        spans = []
        for rs in doc["resourceSpans"]:
            resource = {a["key"]: _plain(a["value"]) for a in rs["resource"]["attributes"]}
            for ss in rs["scopeSpans"]:
                for span in ss["spans"]:
                    span["resource"] = resource
                    span["attrs"] = {a["key"]: _plain(a["value"]) for a in span["attributes"]}
                    spans.append(span)
        with self.cond:
            self.posts.append({"path": path, **headers})
            self.spans.extend(spans)
            self.cond.notify_all()

    def wait_spans(self, count: int, timeout: float = 20.0) -> list[dict[str, Any]]:
        deadline = time.monotonic() + timeout
        with self.cond:
            while len(self.spans) < count:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"{len(self.spans)} spans of {count}: {self.spans}")
                self.cond.wait(left)
            return list(self.spans)

    def wait_for(self, match: Callable[[dict[str, Any]], bool], timeout: float = 20.0) -> dict:
        """The first span received for which ``match`` is true (waiting for it)."""
        deadline = time.monotonic() + timeout
        with self.cond:
            while True:
                for span in self.spans:
                    if match(span):
                        return span
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"no such span among {self.spans}")
                self.cond.wait(left)

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(5)


def _plain(value: dict[str, Any]) -> Any:
    """An OTLP JSON AnyValue as Python."""
    if "stringValue" in value:
        return value["stringValue"]
    if "intValue" in value:
        return int(value["intValue"])
    if "boolValue" in value:
        return value["boolValue"]
    if "arrayValue" in value:
        return [_plain(v) for v in value["arrayValue"].get("values", [])]
    raise AssertionError(f"unexpected value {value}")
