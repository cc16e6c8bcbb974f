"""The Kubernetes providers at scale, end to end: API server emulator -> ``edge run``.

Fills the API server emulator (``tests/kube/emulator.py``, in this process) with a
cluster, starts ``python -m edge run`` with its provider pointed at it, and measures:

- **first swap** (``--swaps`` times, a fresh edge each, medians): from the process' start,
  and from the first LIST the API server saw, to ``/ready`` answering 200 (``/ready`` is
  200 once the first configuration built from a complete sync is swapped in), in wall
  time and in edge's CPU time (``/proc/<pid>/stat``, all threads); the provider's log
  line gives the conversion time. The emulator answers the LISTs in this process, and
  encoding tens of megabytes of JSON here is its cost, not edge's: the time from its
  last LIST answer to the swap is edge's own;
- **memory**: edge's resident set (VmRSS, VmHWM) after the first swap and at the end;
- **rounds** (``--rounds`` of each kind, medians): edge's CPU for one round, from the
  change written to the API server to the data plane's log line that applied it, less
  what edge spends idle meanwhile: ``endpoints`` replaces one endpoint's address in
  ``--changed`` EndpointSlices at once (applied in place), ``edit`` changes one
  IngressRoute's (Ingress's) match (a router rebuild);
- **churn**: edge's CPU while 10 EndpointSlice changes per second (``--churn``) land, idle
  and under a keep-alive wrk load on one route (an nginx backend, one worker); quiet and
  churning runs alternate (``--runs`` of each, ``--duration`` s), and the table shows
  req/s, edge CPU per second and per request, and what churn costs.

The cluster: by default the kubernetesIngress provider's, N Ingresses (one host each,
Prefix ``/``), N Services and N EndpointSlices holding E ready endpoints each (default
5,000 / 5,000 / 20,000 endpoints); with ``--crd`` the kubernetesCRD provider's, made by
``kube_scale.crd_objects`` (default 5,000 IngressRoutes of two routes, 1,000
IngressRouteTCPs, 500 IngressRouteUDPs, 6,500 Services, 20,000 endpoints). The routed
host (``app0.example.com``; ``app1`` with ``--crd``, whose ``app0`` is TLS) has one
endpoint, the nginx backend; every other endpoint is a 10.x address nothing listens on
(never dialled: wrk asks for that host only).

    .venv/bin/python loadtest/kube_provider_scale.py [--ingresses 5000] [--endpoints 4]
        [--churn 10] [--runs 3] [--duration 10] [--throttle 2s] [--json out.json]
    .venv/bin/python loadtest/kube_provider_scale.py --crd [--routes 5000] [--tcp-routes 1000]
        [--udp-routes 500] [--total-endpoints 20000] [--swaps 3] [--rounds 5] [--first-swap-only]

Needs nginx and wrk (as ``bench.py``). Every process it starts is stopped at the end.
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import json
import os
import random
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.kube.emulator import Emulator  # noqa: E402

sys.path.insert(0, str(ROOT / "loadtest"))
from kube_scale import crd_objects, crd_slice, crd_spread, ingress_route  # noqa: E402

TOKEN = "bench-token"
HOST = "127.0.0.1"
LISTEN_RE = re.compile(r"entrypoint (\S+): listening on \[?([0-9a-f.:]+?)\]?:(\d+)")
CLK_TCK = os.sysconf("SC_CLK_TCK")


# --- the cluster ------------------------------------------------------------------------


def namespace(i: int) -> str:
    return f"team-{i % 50}"


def fake_ip(i: int, j: int) -> str:
    n = i * 16 + j
    return f"10.{(n >> 16) & 255}.{(n >> 8) & 255}.{n & 255}"


def slice_obj(i: int, addresses: list[str], port: int) -> dict[str, Any]:
    return {
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {
            "name": f"svc{i}-abcde",
            "namespace": namespace(i),
            "labels": {"kubernetes.io/service-name": f"svc{i}"},
        },
        "addressType": "IPv4",
        "endpoints": [
            {"addresses": [a], "conditions": {"ready": True, "serving": True, "terminating": False},
             "nodeName": f"node-{k % 20}"}
            for k, a in enumerate(addresses)
        ],
        "ports": [{"name": "http", "port": port, "protocol": "TCP"}],
    }  # fmt: skip


def ingress_obj(i: int, edit: int = 0) -> dict[str, Any]:
    """Ingress ``app<i>``: host ``app<i>.example.com``, Prefix ``/`` (``/v<edit>``)."""
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "Ingress",
        "metadata": {"name": f"app{i}", "namespace": namespace(i)},
        "spec": {"ingressClassName": "edge", "rules": [{
            "host": f"app{i}.example.com",
            "http": {"paths": [{"path": f"/v{edit}" if edit else "/", "pathType": "Prefix",
                                "backend": {"service": {"name": f"svc{i}",
                                                        "port": {"number": 80}}}}]},
        }]},
    }  # fmt: skip


class IngressCluster:
    """The kubernetesIngress provider's cluster: Ingress, Service and EndpointSlice
    ``i`` for each i; Service 0 routes to the backend."""

    provider = "kubernetesIngress"
    bench = 0  # the Service (and host) wrk loads
    entry_points = {"web": f"{HOST}:0"}

    def __init__(self, ingresses: int, endpoints: int) -> None:
        self.n, self.e = ingresses, endpoints
        self.services = ingresses
        self.http_services = ingresses  # Services 0..n-1 are HTTP ones

    def fill(self, emu: Emulator, backend_port: int) -> str:
        """Create the objects; returns what was made."""
        emu.create(
            {
                "apiVersion": "networking.k8s.io/v1",
                "kind": "IngressClass",
                "metadata": {"name": "edge"},
                "spec": {"controller": "edge.dev/ingress-controller"},
            }
        )
        total = 0
        for i in range(self.n):
            emu.create(
                {
                    "apiVersion": "v1",
                    "kind": "Service",
                    "metadata": {"name": f"svc{i}", "namespace": namespace(i)},
                    "spec": {"type": "ClusterIP", "clusterIP": fake_ip(i, 15),
                             "ports": [{"name": "http", "port": 80, "targetPort": 8080,
                                        "protocol": "TCP"}]},
                }
            )  # fmt: skip
            eps = self.slice(i) if i else slice_obj(i, [HOST], backend_port)
            total += len(eps["endpoints"])
            emu.create(eps)
            emu.create(ingress_obj(i))
        return f"{self.n} Ingresses, {self.n} Services, {self.n} EndpointSlices, {total} endpoints"

    def slice(self, i: int) -> dict[str, Any]:
        """EndpointSlice ``i`` as created (``i`` > 0)."""
        return slice_obj(i, [fake_ip(i, j) for j in range(self.e)], 8080)

    def edit(self, i: int, edit: int) -> dict[str, Any]:
        """The route object ``i`` with its match changed (the ``edit``-th time)."""
        return ingress_obj(i, edit)


class CRDCluster:
    """The kubernetesCRD provider's cluster, :func:`kube_scale.crd_objects`; Service 1
    (IngressRoute ``app1``, host ``app1.example.com`` on ``web``) routes to the backend."""

    provider = "kubernetesCRD"
    bench = 1
    entry_points = {"web": f"{HOST}:0", "websecure": f"{HOST}:0", "udp": f"{HOST}:0/udp"}

    def __init__(self, routes: int, tcp: int, udp: int, endpoints: int) -> None:
        self.routes, self.tcp = routes, tcp
        self.objects = crd_objects(routes, tcp, udp, endpoints)
        self.spread = crd_spread(routes, tcp, udp, endpoints)
        self.services = len(self.spread)
        self.http_services = routes

    def fill(self, emu: Emulator, backend_port: int) -> str:
        made = []
        for kind, docs in self.objects.items():
            for doc in docs:
                if doc["kind"] == "EndpointSlice" and doc["metadata"]["name"] == "svc1-abcde":
                    doc = slice_obj(self.bench, [HOST], backend_port)
                emu.create(doc)
            made.append(f"{len(docs)} {kind}")
        return f"{', '.join(made)}, {sum(self.spread) - self.spread[self.bench] + 1} endpoints"

    def slice(self, i: int) -> dict[str, Any]:
        return crd_slice(i, self.routes, self.tcp, self.spread[i])

    def edit(self, i: int, edit: int) -> dict[str, Any]:
        return ingress_route(i, edit)


Cluster = IngressCluster | CRDCluster


class Changes:
    """An endless sequence of distinct EndpointSlice changes (one endpoint's new address),
    of Services ``[first, last)`` but the routed one, chosen at random."""

    def __init__(self, cluster: Cluster, first: int = 0, last: int | None = None) -> None:
        self.cluster = cluster
        self.first, self.last = first, cluster.services if last is None else last
        self._rand = random.Random(7)
        self._gen = 0

    def next(self) -> dict[str, Any]:
        i = self.cluster.bench
        while i == self.cluster.bench:
            i = self._rand.randrange(self.first, self.last)
        self._gen += 1
        eps = self.cluster.slice(i)
        eps["metadata"].pop("resourceVersion", None)
        endpoint = eps["endpoints"][self._rand.randrange(len(eps["endpoints"]))]
        endpoint["addresses"] = [f"10.255.{(self._gen >> 8) & 255}.{self._gen & 255}"]
        return eps


class Churn:
    """``rate`` EndpointSlice changes per second from a thread, while in its ``with``."""

    def __init__(self, emu: Emulator, changes: Changes, rate: float) -> None:
        self.emu, self.source, self.rate = emu, changes, rate
        self.changes = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="churn", daemon=True)

    def __enter__(self) -> Churn:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)

    def _run(self) -> None:
        start = time.monotonic()
        while not self._stop.is_set():
            self.emu.update(self.source.next())
            self.changes += 1
            wait = start + self.changes / self.rate - time.monotonic()
            if wait > 0:
                self._stop.wait(wait)


# --- processes ------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def start_nginx(workdir: Path, port: int) -> subprocess.Popen:
    nginx = shutil.which("nginx") or "/usr/sbin/nginx"
    conf = workdir / "nginx.conf"
    temps = "\n".join(
        f"    {k}_temp_path {workdir}/{k};"
        for k in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")
    )
    conf.write_text(
        f"""worker_processes 1;
daemon off;
master_process on;
pid {workdir}/nginx.pid;
error_log {workdir}/nginx-error.log warn;
events {{ worker_connections 4096; }}
http {{
    access_log off;
    keepalive_timeout 75s;
    keepalive_requests 1000000;
{temps}
    server {{
        listen {HOST}:{port};
        location / {{ default_type text/plain; return 200 "hello world\\n"; }}
    }}
}}
"""
    )
    proc = subprocess.Popen(
        [nginx, "-p", str(workdir), "-c", str(conf), "-e", str(workdir / "nginx-error.log")],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    wait_port(port, 10)
    return proc


def wait_port(port: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            socket.create_connection((HOST, port), timeout=0.5).close()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise TimeoutError(f"nothing listens on {port}") from None
            time.sleep(0.02)


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(5)


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK  # utime, stime


def memory(pid: int) -> dict[str, float]:
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            out[key] = int(value.split()[0]) / 1024  # MiB
    return out


def ready(port: int) -> bool:
    conn = http.client.HTTPConnection(HOST, port, timeout=2)
    try:
        conn.request("GET", "/ready")
        return conn.getresponse().status == 200
    except OSError:
        return False
    finally:
        conn.close()


def log_lines(path: Path) -> list[str]:
    return path.read_text(errors="replace").splitlines()


def wrk(port: int, host: str, duration: float, connections: int) -> dict[str, float]:
    out = subprocess.run(
        ["wrk", "-t1", f"-c{connections}", f"-d{max(1, round(duration))}s", "--timeout", "5s",
         "-H", f"Host: {host}", f"http://{HOST}:{port}/"],
        capture_output=True, text=True, timeout=duration + 30,
    ).stdout  # fmt: skip
    rps = re.search(r"Requests/sec:\s+([\d.]+)", out)
    non2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    sock = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", out)
    errors = (int(non2xx.group(1)) if non2xx else 0) + (sum(map(int, sock.groups())) if sock else 0)
    total = re.search(r"(\d+) requests in", out)
    return {
        "rps": float(rps.group(1)) if rps else 0.0,
        "requests": int(total.group(1)) if total else 0,
        "errors": errors,
    }


def parse_seconds(text: str) -> float:
    m = re.fullmatch(r"([\d.]+)(ms|s)?", text.strip())
    if m is None:
        raise SystemExit(f"--throttle {text!r}: expected e.g. 2s or 500ms")
    return float(m.group(1)) / (1000 if m.group(2) == "ms" else 1)


# --- the run ------------------------------------------------------------------------------


def launch(
    emu: Emulator, workdir: Path, command: list[str], name: str
) -> tuple[subprocess.Popen, Path, dict[str, int], dict[str, Any]]:
    """Start edge; wait for its first swap (``/ready`` 200). Returns the process, its log,
    its entry points' ports and the first swap's figures."""
    edge_log = workdir / f"{name}.log"
    env = {k: v for k, v in os.environ.items() if k not in ("POD_NAME", "POD_NAMESPACE")}
    started = time.monotonic()
    with open(edge_log, "w") as logf:
        edge = subprocess.Popen(
            command,
            cwd=ROOT, stdout=subprocess.DEVNULL, stderr=logf, env=env, start_new_session=True,
        )  # fmt: skip
    ports: dict[str, int] = {}
    cpu_at_list: float | None = None  # edge's CPU seconds when its first LIST arrived
    deadline = started + 120
    # /ready is asked only after the first LIST: edge answers it 200 from when its ping
    # entry point is bound until its providers are started (they are not expected yet)
    while cpu_at_list is None or "traefik" not in ports or not ready(ports["traefik"]):
        if cpu_at_list is None and emu.count(since=started):
            cpu_at_list = cpu_seconds(edge.pid)
        if time.monotonic() > deadline or edge.poll() is not None:
            stop(edge)
            raise RuntimeError("edge never ready:\n" + "\n".join(log_lines(edge_log)[-20:]))
        if "traefik" not in ports:
            for line in log_lines(edge_log):
                m = LISTEN_RE.search(line)
                if m:
                    ports[m.group(1)] = int(m.group(3))
        time.sleep(0.005)
    ready_at = time.monotonic()
    cpu = cpu_seconds(edge.pid)
    first_list = min((r.at for r in emu.requests if r.at >= started), default=float("nan"))
    # The emulator's own time (encoding and writing a 20,000-endpoint LIST, in this
    # process) is not edge's: edge's part runs from the last LIST answer to the swap.
    answered = [a for a in emu.list_answers if a.received >= started and a.answered <= ready_at]
    last_answer = max((a.answered for a in answered), default=float("nan"))
    slowest = max(answered, key=lambda a: a.answered - a.received, default=None)
    sync = next((ln for ln in log_lines(edge_log) if "first sync after" in ln), "")
    conv = re.search(r"converted in ([\d.]+) s", sync)
    return (
        edge,
        edge_log,
        ports,
        {
            "from_process_start_s": round(ready_at - started, 3),
            "from_first_list_s": round(ready_at - first_list, 3),
            "lists_answered_s": round(last_answer - first_list, 3),
            "from_last_list_answer_s": round(ready_at - last_answer, 3),
            "slowest_list": (
                f"{slowest.path} {slowest.size / 1e6:.1f} MB in "
                f"{slowest.answered - slowest.received:.3f} s"
                if slowest
                else ""
            ),
            "cpu_from_process_start_s": round(cpu, 2),
            "cpu_from_first_list_s": round(cpu - (cpu_at_list or 0.0), 2),
            "conversion_s": float(conv.group(1)) if conv else None,
            "memory_mib": memory(edge.pid),
            "provider_log": sync.split(": ", 1)[-1],
        },
    )


def applied(path: Path) -> int:
    """Rounds the data plane has applied so far (in place or rebuilt), by its log."""
    return sum("configuration applied" in ln for ln in log_lines(path))


def round_cpu(
    emu: Emulator,
    pid: int,
    edge_log: Path,
    change: Any,
    count: int,
    settle: float,
    idle_per_s: float,
) -> list[dict[str, float]]:
    """``count`` rounds, each ``change()`` written once the last window has passed: edge's
    CPU from the write to the round's log line (less ``idle_per_s``) and the latency."""
    out = []
    for _ in range(count):
        time.sleep(settle)
        before = applied(edge_log)
        c0, t0 = cpu_seconds(pid), time.monotonic()
        change()
        while applied(edge_log) == before:
            if time.monotonic() > t0 + 60:
                raise RuntimeError(
                    "a round was never applied:\n" + "\n".join(log_lines(edge_log)[-20:])
                )
            time.sleep(0.005)
        t1 = time.monotonic()
        time.sleep(0.1)  # the commit's last work (gc.freeze, the log line's neighbours)
        elapsed = time.monotonic() - t0
        out.append({
            "cpu_s": round(cpu_seconds(pid) - c0 - idle_per_s * elapsed, 3),
            "latency_s": round(t1 - t0, 3),
        })  # fmt: skip
    return out


def median_of(runs: list[dict[str, Any]], key: str) -> float:
    return statistics.median(r[key] for r in runs if r[key] is not None)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--crd", action="store_true", help="the kubernetesCRD provider's cluster")
    ap.add_argument("--ingresses", type=int, default=5000)
    ap.add_argument("--endpoints", type=int, default=4, help="endpoints per EndpointSlice")
    ap.add_argument("--routes", type=int, default=5000, help="--crd: IngressRoutes")
    ap.add_argument("--tcp-routes", type=int, default=1000, help="--crd: IngressRouteTCPs")
    ap.add_argument("--udp-routes", type=int, default=500, help="--crd: IngressRouteUDPs")
    ap.add_argument("--total-endpoints", type=int, default=20000, help="--crd: endpoints in all")
    ap.add_argument("--swaps", type=int, default=3, help="first swaps measured (a fresh edge each)")
    ap.add_argument("--rounds", type=int, default=5, help="rounds of each kind measured")
    ap.add_argument("--changed", type=int, default=10, help="EndpointSlices per endpoints round")
    ap.add_argument("--churn", type=float, default=10.0, help="EndpointSlice changes per second")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--duration", type=float, default=10.0)
    ap.add_argument("--connections", type=int, default=50)
    ap.add_argument(
        "--throttle", default="2s", help="providersThrottleDuration (Traefik's default 2s)"
    )
    ap.add_argument("--json", type=Path)
    ap.add_argument("--keep-tmp", action="store_true")
    ap.add_argument(
        "--first-swap-only", action="store_true", help="stop after the first swaps and rounds"
    )
    ap.add_argument(
        "--profile",
        type=Path,
        help="run the last edge under py-spy (in the venv): a flame graph (.svg) or folded stacks",
    )
    args = ap.parse_args()
    for tool in ("wrk", "nginx"):
        if not (shutil.which(tool) or Path(f"/usr/sbin/{tool}").exists()):
            print(f"{tool} is not installed", file=sys.stderr)
            return 2

    cluster: Cluster = (
        CRDCluster(args.routes, args.tcp_routes, args.udp_routes, args.total_endpoints)
        if args.crd
        else IngressCluster(args.ingresses, args.endpoints)
    )
    bench_host = f"app{cluster.bench}.example.com"
    print(f"load average before: {os.getloadavg()[0]:.2f} ({os.cpu_count()} CPUs)")
    workdir = Path(tempfile.mkdtemp(prefix="kube-scale-"))
    workdir.chmod(0o755)
    results: dict[str, Any] = {"args": {k: str(v) for k, v in vars(args).items()}}
    results["load_average_before"] = os.getloadavg()
    procs: list[subprocess.Popen] = []
    emu = Emulator(token=TOKEN, bookmark_interval=60.0).start()
    try:
        backend_port = free_port()
        procs.append(start_nginx(workdir, backend_port))
        t = time.perf_counter()
        made = cluster.fill(emu, backend_port)
        print(f"cluster: {made} (emulator filled in {time.perf_counter() - t:.1f} s)")
        static = {
            "entryPoints": {
                name: {"address": address}
                for name, address in {**cluster.entry_points, "traefik": f"{HOST}:0"}.items()
            },
            "providers": {cluster.provider: {"endpoint": emu.url, "token": TOKEN}},
            "providersThrottleDuration": args.throttle,
            "ping": {"entryPoint": "traefik"},
            "log": {"level": os.environ.get("EDGE_LOG_LEVEL", "INFO")},
        }
        (workdir / "edge.yaml").write_text(yaml.safe_dump(static))
        command = [sys.executable, "-m", "edge", "run", "-c", str(workdir / "edge.yaml")]

        swaps = []
        for k in range(max(1, args.swaps)):
            last = k == max(1, args.swaps) - 1
            cmd = command
            if last and args.profile:
                spy = Path(sys.executable).parent / "py-spy"
                fmt = "flamegraph" if args.profile.suffix == ".svg" else "raw"  # raw: folded stacks
                cmd = [str(spy), "record", "-r", "200", "-t", "-f", fmt, "-o", str(args.profile),
                       "--", *command]  # fmt: skip
            edge, edge_log, ports, swap = launch(emu, workdir, cmd, f"edge-{k}")
            procs.append(edge)
            swaps.append(swap)
            print(f"first router swap: {swap['from_process_start_s']:.2f} s after the process "
                  f"started ({swap['cpu_from_process_start_s']:.2f} s CPU), "
                  f"{swap['from_first_list_s']:.2f} s after its first LIST, "
                  f"{swap['from_last_list_answer_s']:.2f} s after the emulator's last LIST "
                  f"answer (the LISTs took {swap['lists_answered_s']:.2f} s; slowest "
                  f"{swap['slowest_list']}) "
                  f"({swap['cpu_from_first_list_s']:.2f} s CPU; conversion "
                  f"{swap['conversion_s']} s); memory {swap['memory_mib']}; "
                  f"load {os.getloadavg()[0]:.2f}")  # fmt: skip
            if not last:
                stop(edge)
                procs.remove(edge)
        results["first_swaps"] = swaps
        results["first_swap"] = {
            key: median_of(swaps, key)
            for key in ("from_process_start_s", "from_first_list_s", "lists_answered_s",
                        "from_last_list_answer_s", "cpu_from_process_start_s",
                        "cpu_from_first_list_s", "conversion_s")
        }  # fmt: skip
        results["memory_after_first_swap_mib"] = {
            key: statistics.median(s["memory_mib"][key] for s in swaps)
            for key in ("VmRSS", "VmHWM")
        }
        print(f"first swap, medians of {len(swaps)}: {results['first_swap']}; "
              f"memory {results['memory_after_first_swap_mib']}")  # fmt: skip

        settle = parse_seconds(args.throttle) + 1.0
        time.sleep(3)  # let the first sync settle
        c0, t0 = cpu_seconds(edge.pid), time.monotonic()
        time.sleep(3)
        quiet = (cpu_seconds(edge.pid) - c0) / (time.monotonic() - t0)
        results["quiet_cpu_per_s"] = round(quiet, 4)
        rng = random.Random(11)
        edits = [0]

        def edit() -> None:
            edits[0] += 1
            i = cluster.bench
            while i == cluster.bench:
                i = rng.randrange(cluster.http_services)
            emu.update(cluster.edit(i, edits[0]))

        def slices(source: Changes) -> Any:
            return lambda: [emu.update(source.next()) for _ in range(args.changed)]

        kinds = {
            f"endpoints ({args.changed} HTTP slices)": slices(
                Changes(cluster, 0, cluster.http_services)
            )
        }
        if cluster.http_services < cluster.services:
            kinds[f"endpoints ({args.changed} TCP/UDP slices)"] = slices(
                Changes(cluster, cluster.http_services)
            )
        kinds["edit (one route's match)"] = edit
        results["rounds"] = {}
        for label, change in kinds.items() if args.rounds > 0 else ():
            measured = round_cpu(emu, edge.pid, edge_log, change, args.rounds, settle, quiet)
            results["rounds"][label] = {
                "cpu_s": median_of(measured, "cpu_s"),
                "latency_s": median_of(measured, "latency_s"),
                "runs": measured,
            }
            print(f"round, {label}: edge CPU {median_of(measured, 'cpu_s'):.3f} s, change to "
                  f"applied {median_of(measured, 'latency_s'):.2f} s (medians of {len(measured)}: "
                  f"{', '.join(str(r['cpu_s']) for r in measured)} s CPU)")  # fmt: skip
        if args.first_swap_only:
            results["memory_at_end_mib"] = memory(edge.pid)
            results["load_average_at_end"] = os.getloadavg()
            print(f"memory at the end: {results['memory_at_end_mib']}; "
                  f"load average at the end: {os.getloadavg()[0]:.2f}")  # fmt: skip
            if args.json:
                args.json.write_text(json.dumps(results, indent=2))
            return 0

        port = ports["web"]
        probe = wrk(port, bench_host, 1, 1)
        if probe["rps"] <= 0 or probe["errors"]:
            raise RuntimeError(f"{bench_host} does not answer through edge: {probe}")
        # idle: what the churn alone costs
        changes_source = Changes(cluster)
        idle: dict[str, list[float]] = {"quiet": [], "churn": []}
        for mode in ("quiet", "churn", "quiet", "churn"):
            c0 = cpu_seconds(edge.pid)
            with (
                Churn(emu, changes_source, args.churn)
                if mode == "churn"
                else contextlib.nullcontext()
            ):
                time.sleep(args.duration / 2)
            idle[mode].append((cpu_seconds(edge.pid) - c0) / (args.duration / 2))
            time.sleep(settle)  # the last changes' round ends before the next phase
        results["idle_cpu_per_s"] = {k: round(statistics.median(v), 3) for k, v in idle.items()}
        print(
            f"idle edge CPU: quiet {results['idle_cpu_per_s']['quiet']:.3f} s/s, with "
            f"{args.churn:g} slice changes/s {results['idle_cpu_per_s']['churn']:.3f} s/s"
        )
        wrk(port, bench_host, 2, args.connections)  # warm-up
        runs: dict[str, list[dict[str, float]]] = {"quiet": [], "churn": []}
        applied_before = sum("configuration applied in place" in ln for ln in log_lines(edge_log))
        rebuilds_before = sum("configuration applied:" in ln for ln in log_lines(edge_log))
        changes = 0
        for _ in range(args.runs):
            for mode in ("quiet", "churn"):
                churn = Churn(emu, changes_source, args.churn) if mode == "churn" else None
                c0 = cpu_seconds(edge.pid)
                h0 = time.process_time()
                t0 = time.monotonic()
                with churn if churn is not None else contextlib.nullcontext():
                    res = wrk(port, bench_host, args.duration, args.connections)
                elapsed = time.monotonic() - t0
                res["edge_cpu_per_s"] = (cpu_seconds(edge.pid) - c0) / elapsed
                # this process: the emulator serving watches and the churn writing objects,
                # CPU the 2 cores' wrk, nginx and edge do not get (on a cluster: elsewhere)
                res["harness_cpu_per_s"] = (time.process_time() - h0) / elapsed
                res["edge_cpu_us_per_request"] = (
                    (cpu_seconds(edge.pid) - c0) / res["requests"] * 1e6 if res["requests"] else 0.0
                )
                if churn is not None:
                    changes += churn.changes
                runs[mode].append(res)
                time.sleep(settle)
                print(f"  {mode:5}: {res['rps']:9.0f} req/s, edge CPU {res['edge_cpu_per_s']:.2f} s/s, "
                      f"{res['edge_cpu_us_per_request']:.1f} us/request, errors {res['errors']}, "
                      f"emulator+churn CPU {res['harness_cpu_per_s']:.3f} s/s")  # fmt: skip
        lines = log_lines(edge_log)
        in_place = sum("configuration applied in place" in ln for ln in lines) - applied_before
        rebuilds = sum("configuration applied:" in ln for ln in lines) - rebuilds_before
        summary = {
            mode: {
                "rps": round(statistics.median(r["rps"] for r in rs)),
                "edge_cpu_per_s": round(statistics.median(r["edge_cpu_per_s"] for r in rs), 3),
                "harness_cpu_per_s": round(
                    statistics.median(r["harness_cpu_per_s"] for r in rs), 3
                ),
                "us_per_request": round(
                    statistics.median(r["edge_cpu_us_per_request"] for r in rs), 2
                ),
                "errors": sum(int(r["errors"]) for r in rs),
            }
            for mode, rs in runs.items()
        }
        ratio = summary["churn"]["rps"] / summary["quiet"]["rps"] if summary["quiet"]["rps"] else 0
        results["serving"] = summary
        results["churn_over_quiet_rps"] = round(ratio, 3)
        results["slice_changes"] = changes
        results["applied_in_place"] = in_place
        results["router_rebuilds_during_churn"] = rebuilds
        results["memory_at_end_mib"] = memory(edge.pid)
        print(f"keep-alive throughput with {args.churn:g} slice changes/s: {ratio:.3f} x quiet "
              f"({summary['churn']['rps']} vs {summary['quiet']['rps']} req/s, medians of {args.runs}); "
              f"{changes} changes applied as {in_place} in-place updates, {rebuilds} router rebuilds")  # fmt: skip
        print(f"memory at the end: {results['memory_at_end_mib']}")
        results["load_average_at_end"] = os.getloadavg()[0]
        print(f"load average at the end: {results['load_average_at_end']:.2f}")
        if args.json:
            args.json.write_text(json.dumps(results, indent=2))
        return 0
    finally:
        if args.profile and len(procs) > 1 and procs[1].poll() is None:
            procs[1].send_signal(signal.SIGINT)  # py-spy writes its graph on SIGINT
            with contextlib.suppress(subprocess.TimeoutExpired):
                procs[1].wait(30)
        for p in reversed(procs):
            stop(p)
        emu.stop()
        if not args.keep_tmp:
            shutil.rmtree(workdir, ignore_errors=True)
        else:
            print(f"kept {workdir}")


if __name__ == "__main__":
    sys.exit(main())
