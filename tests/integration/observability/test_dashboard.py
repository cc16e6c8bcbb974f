"""The dashboard (``api.dashboard``, edge/dashboard/, served by edge/api.py) on a running
edge, read by real clients: http.client for what is served and how, headless Chromium
(driven over the DevTools protocol, tests/integration/observability/browser.py) for
what the page shows.

Each browser test fails on any error the page reported (console errors, uncaught
exceptions, a resource that failed, a Content-Security-Policy violation). Screenshots
(``dashboard-*.png``) are kept in ``$EDGE_TEST_ARTIFACTS`` when set, else in pytest's
temporary folder (``/tmp/pytest-of-$USER/pytest-N/artifacts0/``); each test prints
where.
"""

from __future__ import annotations

import http.client
import json
import os
import re
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from edge.api import DASHBOARD_CSP
from tests.harness import Edge, get, lb
from tests.integration.observability.browser import Browser, chromium

EVIL_ROUTER = "evil<img src=x onerror=window.pwned=1>"
EVIL_RULE = "Host(`<script>window.pwned=2</script>.test`)"
EVIL_MIDDLEWARE = "<b>bold</b>"
EVIL_NAME = "eu-1 <i onmouseover=window.pwned=4>edge</i>"  # api.dashboardName
PROMETHEUS = {"prometheus": {"addRoutersLabels": True}}
UNCOUNTED = "\u2013"  # what the page shows where it has no rate


def dynamic(whoami_url: str) -> dict:
    return {
        "http": {
            "routers": {
                "site": {
                    "entryPoints": ["web"],
                    "rule": "Host(`site.test`)",
                    "service": "app",
                    "middlewares": ["strip"],
                },
                "fail": {"entryPoints": ["web"], "rule": "Host(`fail.test`)", "service": "app"},
                "checked": {
                    "entryPoints": ["web"],
                    "rule": "Host(`checked.test`)",
                    "service": "checked",
                },
                "orphan": {
                    "entryPoints": ["web"],
                    "rule": "Host(`orphan.test`)",
                    "service": "nope",
                },
                EVIL_ROUTER: {
                    "entryPoints": ["web"],
                    "rule": EVIL_RULE,
                    "service": "app",
                    "middlewares": [EVIL_MIDDLEWARE],
                },
            },
            "services": {
                "app": lb(whoami_url),
                "checked": lb(
                    whoami_url,
                    "http://127.0.0.1:9",  # discard: nothing listens, its check fails
                    healthCheck={"path": "/", "interval": "500ms", "timeout": "500ms"},
                ),
            },
            "middlewares": {
                "strip": {"stripPrefix": {"prefixes": ["/x"]}},
                EVIL_MIDDLEWARE: {
                    "headers": {"customRequestHeaders": {"X-Evil": "<script>window.pwned=3"}}
                },
            },
        },
        "tcp": {
            "routers": {
                "db": {
                    "entryPoints": ["web"],
                    "rule": "HostSNI(`db.test`)",
                    "service": "db",
                    "tls": {"passthrough": True},
                }
            },
            "services": {"db": {"loadBalancer": {"servers": [{"address": "127.0.0.1:9"}]}}},
        },
        "udp": {
            "routers": {"dns": {"entryPoints": ["dns"], "service": "dns"}},
            "services": {"dns": {"loadBalancer": {"servers": [{"address": "127.0.0.1:9"}]}}},
        },
    }


def start(folder: Path, whoami_url: str, api: dict | None = None, **static: dict) -> Edge:
    return Edge(
        folder,
        dynamic(whoami_url),
        entrypoints={
            "web": {"address": "127.0.0.1:0"},
            "dns": {"address": "127.0.0.1:0/udp"},
        },
        static_extra={"api": api if api is not None else {"insecure": True}, **static},
    )


@pytest.fixture(scope="module")
def served(tmp_path_factory, whoami) -> Iterator[Edge]:
    api = {"insecure": True, "dashboardName": EVIL_NAME}
    e = start(tmp_path_factory.mktemp("dashboard"), whoami.url, api, metrics=PROMETHEUS)
    yield e
    e.stop()


@pytest.fixture(scope="module")
def browser(tmp_path_factory) -> Iterator[Browser]:
    chromium()  # skips, saying why, where there is none
    b = Browser(tmp_path_factory.mktemp("chromium"))
    yield b
    b.close()


@pytest.fixture(scope="module")
def artifacts(tmp_path_factory) -> Path:
    """Where screenshots are kept: ``$EDGE_TEST_ARTIFACTS``, else pytest's temporary
    folder (which keeps the last three runs only)."""
    chosen = os.environ.get("EDGE_TEST_ARTIFACTS")
    if not chosen:
        return tmp_path_factory.mktemp("artifacts")
    folder = Path(chosen)
    folder.mkdir(parents=True, exist_ok=True)
    return folder


@pytest.fixture
def page(browser: Browser) -> Iterator[Browser]:
    """The browser, its errors so far forgotten; the test fails on any it reports."""
    browser.problems()
    browser.events.clear()
    yield browser
    assert browser.problems() == []


def dashboard(e: Edge) -> str:
    return f"http://127.0.0.1:{e.ports['traefik']}/dashboard/"


def fetch(port: int, path: str) -> tuple[int, dict[str, str], bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request("GET", path)
        resp = conn.getresponse()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read()
    finally:
        conn.close()


def cell(row: str, css: str) -> str:
    """A JavaScript expression: the text of ``css`` in the view's row named ``row``
    (null while there is none); the name travels as a JSON string, never as markup."""
    return (
        "(() => { const row = [...document.querySelectorAll('#view tr[data-name]')]"
        f".find((r) => r.dataset.name === {json.dumps(row)});"
        f" const c = row && row.querySelector({json.dumps(css)});"
        " return c ? c.textContent : null; })()"
    )


def servers(row: str) -> str:
    """A JavaScript expression: the text of each server of the view's row ``row``."""
    return (
        "[...document.querySelectorAll('#view tr[data-name]')]"
        f".filter((r) => r.dataset.name === {json.dumps(row)})"
        ".flatMap((r) => [...r.querySelectorAll('.server')].map((s) => s.textContent))"
    )


ROW_NAMES = "[...document.querySelectorAll('#view tbody tr')].map((r) => r.dataset.name)"


def equals(expression: str, value: object) -> str:
    """A JavaScript expression: ``expression``'s value is ``value`` (as JSON)."""
    return f"JSON.stringify({expression}) === JSON.stringify({json.dumps(value)})"


def rows_are(names: list[str]) -> str:
    """A JavaScript expression: the view's rows are named ``names``, in this order."""
    return equals(ROW_NAMES, names)


def save(b: Browser, artifacts: Path, name: str) -> Path:
    path = b.screenshot(artifacts / name)
    png = path.read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000, path
    width = int.from_bytes(png[16:20], "big")
    assert width >= 1000, width  # the window's 1400 px, not an empty frame
    print(f"screenshot: {path}")
    return path


# -- what is served, and how --------------------------------------------------------


def test_the_page_and_its_files_are_served_with_a_strict_policy(served):
    port = served.ports["traefik"]
    status, headers, _ = fetch(port, "/")
    assert (status, headers["location"]) == (302, "dashboard/")  # as Traefik, relative
    status, headers, _ = fetch(port, "/dashboard")
    assert (status, headers["location"]) == (302, "dashboard/")
    status, headers, page = fetch(port, "/dashboard/")
    assert status == 200 and headers["content-type"] == "text/html; charset=utf-8"
    assert headers["content-security-policy"] == DASHBOARD_CSP.decode()
    assert "script-src 'self';" in headers["content-security-policy"]
    assert "default-src 'none'" in headers["content-security-policy"]
    assert headers["x-content-type-options"] == "nosniff"
    html = page.decode()
    # No inline script or style: every script has a src, no element has a style or an
    # on... handler, and every address the page names is one of its own files.
    assert all("src=" in tag for tag in re.findall(r"<script[^>]*>", html))
    assert not re.search(r"<style|\sstyle=|\son\w+=", html)
    names = re.findall(r'(?:src|href)="([^"#]+)"', html)
    assert sorted(names) == ["app.js", "favicon.svg", "style.css"], names
    types = {
        "app.js": "text/javascript; charset=utf-8",
        "style.css": "text/css; charset=utf-8",
        "favicon.svg": "image/svg+xml",
    }
    for name, content_type in types.items():
        status, headers, body = fetch(port, "/dashboard/" + name)
        assert status == 200 and headers["content-type"] == content_type, name
        assert headers["content-security-policy"] == DASHBOARD_CSP.decode()
        assert body
        assert not re.search(rb"https?://(?!www\.w3\.org/2000/svg)", body), name  # nothing fetched
    assert fetch(port, "/dashboard/nothing.js")[0] == 404
    assert fetch(port, "/dashboard/../api/version")[0] == 200  # cleaned to the API's path


def test_the_api_and_the_dashboard_under_a_base_path(tmp_path, whoami):
    e = start(tmp_path, whoami.url, {"insecure": True, "basePath": "/edge"})
    try:
        port = e.ports["traefik"]
        assert fetch(port, "/edge/dashboard/")[0] == 200
        assert fetch(port, "/edge/dashboard/app.js")[0] == 200
        status, _, body = fetch(port, "/edge/api/http/routers/site@file")
        assert status == 200 and json.loads(body)["status"] == "enabled"
        status, headers, _ = fetch(port, "/edge")
        assert (status, headers["location"]) == (302, "edge/dashboard/")
        status, headers, _ = fetch(port, "/edge/")
        assert (status, headers["location"]) == (302, "dashboard/")
        assert fetch(port, "/api/version")[0] == 404
        assert fetch(port, "/dashboard/")[0] == 404
        assert fetch(port, "/edgeapi/version")[0] == 404
    finally:
        e.stop()


def test_without_the_dashboard_only_the_api_is_served(tmp_path, whoami):
    e = start(tmp_path, whoami.url, {"insecure": True, "dashboard": False})
    try:
        port = e.ports["traefik"]
        assert fetch(port, "/dashboard/")[0] == 404
        assert fetch(port, "/")[0] == 404
        assert fetch(port, "/api/version")[0] == 200
        status, _, body = fetch(port, "/api/requests")
        assert status == 200 and json.loads(body)["metrics"] is False  # no metrics here
    finally:
        e.stop()


def test_api_requests_counts_what_clients_sent(served):
    port = served.ports["traefik"]
    _, _, before = fetch(port, "/api/requests")
    for _ in range(3):
        assert get(served.port, "/", host="site.test")[0] == 200
    for _ in range(2):
        assert get(served.port, "/?status=503", host="fail.test")[0] == 503
    assert get(served.port, "/", host="nothing.test")[0] == 404
    _, _, after = fetch(port, "/api/requests")
    old, new = json.loads(before), json.loads(after)
    assert new["metrics"] is True and new["time"] >= old["time"]

    def grew(scope: str, name: str) -> dict[str, int]:
        was = old.get(scope, {}).get(name, {})
        now = new[scope][name]
        return {k: v - was.get(k, 0) for k, v in now.items()}

    assert grew("routers", "site@file") == {"requests": 3, "2xx": 3}
    assert grew("routers", "fail@file") == {"requests": 2, "5xx": 2}
    assert grew("services", "app@file") == {"requests": 5, "2xx": 3, "5xx": 2}
    web = grew("entryPoints", "web")
    assert (web["requests"], web["2xx"], web["4xx"], web["5xx"]) == (6, 3, 1, 2)
    assert new["openConnections"]["traefik"] >= 1  # this client's


def test_api_requests_sums_the_workers(tmp_path, whoami):
    """With ``workers: 2`` each worker answers /api/requests with the supervisor's sum
    (pushed every second), whichever worker took the requests."""
    e = start(tmp_path, whoami.url, metrics=PROMETHEUS, workers=2)
    try:
        for _ in range(8):  # a connection each: both workers take some
            assert get(e.port, "/", host="site.test")[0] == 200
        deadline = time.monotonic() + 20
        counted: dict = {}
        while time.monotonic() < deadline:
            _, _, body = fetch(e.ports["traefik"], "/api/requests")
            counted = json.loads(body).get("routers", {}).get("site@file", {})
            if counted.get("requests") == 8:
                break
            time.sleep(0.2)
        assert counted == {"requests": 8, "2xx": 8}
    finally:
        e.stop()


# -- what the page shows (Chromium) -------------------------------------------------


def test_the_page_shows_every_section_without_an_error(served, whoami, page, artifacts):
    page.open(dashboard(served))
    page.wait_for("document.querySelectorAll('#view .card').length === 8")
    page.wait_for(rows_are(["dns", "traefik", "web"]))
    assert page.evaluate(cell("dns", "td:nth-child(3)")) == "UDP"
    counts = page.evaluate(
        "Object.fromEntries([...document.querySelectorAll('#view .card')]"
        ".map((c) => [c.dataset.section, c.querySelector('.total').textContent]))"
    )
    assert counts["http/routers"] == "5" and counts["tcp/routers"] == "1"
    assert counts["udp/routers"] == "1"
    assert page.evaluate("document.querySelector('#version').textContent").startswith("0.")
    save(page, artifacts, "dashboard-overview.png")

    page.evaluate("location.hash = '#/http/services'")
    assert page.wait_for(servers("app@file")) == [f"UP {whoami.url}"]
    # A server its health check took out is shown DOWN, within a few checks.
    checked = [f"UP {whoami.url}", "DOWN http://127.0.0.1:9"]
    page.wait_for(equals(servers("checked@file"), checked))
    page.evaluate("location.hash = '#/http/middlewares'")
    assert page.wait_for(cell("strip@file", "td:nth-child(3)")) == "stripprefix"
    assert page.evaluate(cell("strip@file", ".config")) == '{"prefixes":["/x"]}'
    page.evaluate("location.hash = '#/tcp/routers'")
    assert page.wait_for(cell("db@file", ".rule")) == "HostSNI(`db.test`)"
    assert page.evaluate(cell("db@file", "td:nth-child(7)")) == "passthrough"
    page.evaluate("location.hash = '#/udp/routers'")
    assert page.wait_for(cell("dns@file", "td:nth-child(3)")) == "dns"
    page.evaluate("location.hash = '#/udp/services'")
    assert page.wait_for(servers("dns@file")) == [" 127.0.0.1:9"]


def test_a_disabled_routers_reason_is_shown_and_lists_filter(served, page, artifacts):
    page.open(dashboard(served) + "#/http/routers")
    assert page.wait_for(cell("orphan@file", ".errors")) == "service 'nope@file' does not exist"
    assert page.evaluate(cell("orphan@file", ".status")) == "disabled"
    assert page.evaluate(cell("site@file", ".status")) == "enabled"
    assert page.evaluate(cell("site@file", ".errors")) == ""
    save(page, artifacts, "dashboard-http-routers.png")
    # The API's filters, from the page's controls.
    page.evaluate(
        "(() => { const s = document.querySelector('#status');"
        " s.value = 'disabled'; s.dispatchEvent(new Event('change')); })()"
    )
    page.wait_for(rows_are(["orphan@file"]))
    assert "status=disabled" in page.evaluate("location.hash")
    page.evaluate(
        "(() => { const s = document.querySelector('#search');"
        " s.value = 'SITE'; s.dispatchEvent(new Event('input')); })()"
    )
    page.wait_for(f"{ROW_NAMES}.length === 0 && location.hash.includes('search=SITE')")
    assert "Nothing here matches" in page.evaluate("document.querySelector('#view').textContent")
    page.open(dashboard(served) + "#/http/routers?search=site")
    page.wait_for(rows_are(["site@file"]))
    # A service's "used by" leads to its routers (the API's serviceName filter).
    page.evaluate("location.hash = '#/http/routers?serviceName=app%40file'")
    expected = sorted(["evil<img src=x onerror=window.pwned=1>@file", "fail@file", "site@file"])
    page.wait_for(rows_are(expected))


def test_values_from_the_configuration_are_shown_as_text(served, page):
    page.open(dashboard(served) + "#/http/routers")
    evil = f"{EVIL_ROUTER}@file"
    assert page.wait_for(cell(evil, ".name summary")) == evil
    assert page.evaluate(cell(evil, ".rule")) == EVIL_RULE
    assert page.evaluate(cell(evil, "td:nth-child(6)")) == f"{EVIL_MIDDLEWARE}@file"
    page.evaluate("location.hash = '#/http/middlewares'")
    assert page.wait_for(cell(f"{EVIL_MIDDLEWARE}@file", ".name summary")) == (
        f"{EVIL_MIDDLEWARE}@file"
    )
    assert "<script>window.pwned=3" in page.evaluate(cell(f"{EVIL_MIDDLEWARE}@file", ".config"))
    assert page.evaluate("document.querySelector('#name').textContent") == EVIL_NAME
    assert page.evaluate("document.title") == f"{EVIL_NAME} \u00b7 edge"
    # Nothing of it became markup, and nothing ran.
    markup = "document.querySelectorAll('#view img, #view script, #view b, header i').length"
    assert page.evaluate(markup) == 0
    assert page.evaluate("typeof window.pwned") == "undefined"


def test_request_rates_and_error_ratios_from_edges_counters(served, page, artifacts):
    stop = threading.Event()

    def traffic() -> None:  # about 10 requests a second each, until the test has seen enough
        deadline = time.monotonic() + 90
        while not stop.is_set() and time.monotonic() < deadline:
            get(served.port, "/", host="site.test")
            get(served.port, "/?status=500", host="fail.test")
            stop.wait(0.1)

    sender = threading.Thread(target=traffic, daemon=True)
    sender.start()
    try:
        page.open(dashboard(served) + "#/http/routers")
        page.wait_for(f"{cell('fail@file', '.r5xx')} === '100 %'", timeout=60)
        page.wait_for(f"{cell('site@file', '.r5xx')} === '0 %'", timeout=30)
        assert float(page.evaluate(cell("site@file", ".rate"))) > 0
        assert page.evaluate(cell("orphan@file", ".rate")) == "0"  # counted, nothing came
        page.evaluate("location.hash = '#/http/services'")
        page.wait_for(f"parseFloat({cell('app@file', '.rate')}) > 0", timeout=30)
        ratio = page.evaluate(cell("app@file", ".r5xx"))
        assert 20 <= float(ratio.rstrip(" %")) <= 80, ratio  # half of them, about
        page.evaluate("location.hash = '#/'")
        page.wait_for(f"parseFloat({cell('web', '.rate')}) > 0", timeout=30)
        assert int(page.evaluate(cell("traefik", ".open"))) >= 1  # the page's own
        save(page, artifacts, "dashboard-rates.png")
    finally:
        stop.set()
        sender.join(timeout=30)


def test_the_page_follows_configuration_changes(tmp_path, whoami, page, artifacts):
    e = start(tmp_path, whoami.url)  # no metrics: the page says rates need them
    try:
        page.open(dashboard(e) + "#/http/routers")
        page.wait_for(cell("orphan@file", ".errors"))
        page.evaluate("window.sameDocument = true")
        config = dynamic(whoami.url)
        routers = config["http"]["routers"]
        routers["added"] = {"rule": "Host(`added.test`)", "service": "gone"}
        routers["orphan"]["service"] = "app"
        applied = e.applied()
        e.write_dynamic(config)
        e.wait_applied(applied + 1, timeout=20)
        assert page.wait_for(cell("added@file", ".errors")) == "service 'gone@file' does not exist"
        page.wait_for(f"{cell('orphan@file', '.status')} === 'enabled'")
        assert page.evaluate(cell("orphan@file", ".errors")) == ""
        assert page.evaluate(cell("site@file", ".rate")) == UNCOUNTED  # no counters to read
        assert page.evaluate("window.sameDocument") is True  # the page updated itself
        del routers["added"]
        e.write_dynamic(config)
        page.wait_for(f"!{ROW_NAMES}.includes('added@file')", timeout=30)
        page.evaluate("location.hash = '#/'")
        page.wait_for("!!document.querySelector('#view .note')")
        assert "metrics.prometheus" in page.evaluate(
            "document.querySelector('#view .note').textContent"
        )
        save(page, artifacts, "dashboard-no-metrics.png")
    finally:
        e.stop()


def test_the_dashboard_behind_a_router_naming_api_at_internal(tmp_path, whoami, artifacts):
    """``api`` without ``insecure``: a router serves the API and the dashboard under a
    prefix it strips; the page finds the API relative to itself."""
    chromium()
    config = dynamic(whoami.url)
    config["http"]["routers"]["admin"] = {
        "entryPoints": ["web"],
        "rule": "Host(`admin.test`) && PathPrefix(`/admin`)",
        "service": "api@internal",
        "middlewares": ["admin-strip"],
    }
    config["http"]["middlewares"]["admin-strip"] = {"stripPrefix": {"prefixes": ["/admin"]}}
    e = start(tmp_path, whoami.url, {})
    b = Browser(tmp_path / "chromium", host_rules="MAP admin.test 127.0.0.1")
    try:
        applied = e.applied()
        e.write_dynamic(config)
        e.wait_applied(applied + 1, timeout=20)
        status, headers, _ = get(e.port, "/admin/", host="admin.test")
        assert (status, headers["Location"]) == (302, "dashboard/")  # /admin/dashboard/
        assert get(e.ports["traefik"], "/dashboard/")[0] == 404  # not insecure
        b.open(f"http://admin.test:{e.port}/admin/")
        b.wait_for("location.pathname === '/admin/dashboard/'")
        b.evaluate("location.hash = '#/http/routers'")
        assert b.wait_for(cell("admin@file", ".status")) == "enabled"
        assert b.evaluate(cell("orphan@file", ".errors")) == "service 'nope@file' does not exist"
        save(b, artifacts, "dashboard-behind-a-router.png")
        assert b.problems() == []
    finally:
        b.close()
        e.stop()
