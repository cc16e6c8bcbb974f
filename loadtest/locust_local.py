"""Run loadtest/locustfile.py headless against a local edge, then stop everything.

Run: ``.venv/bin/python loadtest/locust_local.py [--cluster] [--duration 60]
[--users 30] [--csv PREFIX] [--workers N] [--keep-tmp] [-- LOCUST_ARGS...]``
(locust comes with the ``load`` extra: ``.venv/bin/pip install -e '.[load]'``).

Everything runs on 127.0.0.1 with ports the OS picks, in a temporary folder, in one
of two set-ups.

The file set-up (the default) writes a static and a dynamic configuration and a
self-signed certificate (EC P-256, for ``echo.example.test``), and starts two ``edge
whoami`` backends, ``web`` (HTTP, and the UDP echo) and ``api`` (HTTP), a whoami TLS
echo with that certificate, and ``edge run`` with the entry points of the kind
cluster's edge node: ``web`` (HTTP, the routes of k8s/examples' Ingress:
``Host(`web.example.test`)`` -> web, split by ``PathPrefix(`/api`)`` -> api;
``Host(`api.example.test`)`` -> api), ``websecure`` (TLS passthrough:
``HostSNI(`echo.example.test`)`` -> the TLS echo), ``udp`` (-> web's UDP echo) and
``ping``.

The cluster set-up (``--cluster``) serves what the cluster would: it starts the API
server emulator (tests/kube/emulator.py, in this process; the real list/watch
protocol) holding the objects of k8s/examples/ and k8s/examples/crd/ as their
kustomizations list them, read from the YAML files, and the IngressClass of
k8s/ingressclass.yaml; runs each Deployment's replicas here as processes with the
container's own command and arguments (listening addresses moved to 127.0.0.1 port 0,
mounted Secrets copied to files); writes the EndpointSlices the cluster would (one per
pod, the pod's loopback ports); and starts ``edge run`` with the static configuration
of k8s/configmap.yaml, changed only where it must be here: every entry point on a free
loopback port, both Kubernetes providers pointed at the emulator, ``workers`` from
``--workers``, and no wait for a load balancer at stop (requestAcceptGraceTimeout 0).
Before the load, it checks what the users do not: the IngressRoute's Middleware (the
prefix stripped) and the IngressRouteTCP where edge terminates TLS (edge presents the
Secret's certificate, the echo answers). The users then go to the Ingress' and the
IngressRoute's hosts, the passthrough route (the echo must show the certificate of its
own Secret) and the IngressRouteUDP.

Once ``/ready`` answers 200 it runs locust headless with all three users at once
(the environment variables of locustfile.py point them at those ports and name the
expected certificate), writes locust's CSV files (``PREFIX_stats.csv``,
``_failures.csv``, ``_exceptions.csv``, ``_stats_history.csv``), prints one line per
request type, and stops everything (SIGTERM, then SIGKILL). Exit status 0 only when
every user type made requests and none failed.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import csv
import datetime as dt
import hashlib
import http.client
import importlib.util
import json
import os
import re
import resource
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
HOST = "127.0.0.1"
TLS_NAME = "echo.example.test"
BACKENDS = ("web", "api")  # edge whoami --name
# what HTTPUser requests and who must answer: k8s/examples' Ingress, as locustfile.py's default
HTTP_ROUTES = "web.example.test/=web web.example.test/api/users=api api.example.test/=api"
READY_TIMEOUT = 20.0
STOP_TIMEOUT = 10.0
USER_TYPES = ("GET", "TLS", "UDP")  # request_type of HTTPUser, TLSPassthroughUser, UDPUser

WHOAMI_RE = re.compile(r"whoami (\S+): (http|tcp|tls|udp) on ([0-9a-f.:]+):(\d+)")
ACCESS_LOG_RE = re.compile(r"^\S+ \S+ \S+ \[[^]]+\] \"")  # Common Log Format
LISTEN_RE = re.compile(r"entrypoint (\S+): listening on \[?([0-9a-f.:]+?)\]?:(\d+)")


# --- the TLS certificate -------------------------------------------------------------------------


def make_certificate(folder: Path) -> tuple[Path, Path, str]:
    """A self-signed certificate for TLS_NAME: (cert file, key file, SHA-256 fingerprint hex)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, TLS_NAME)])
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(TLS_NAME)]), critical=False)
        .sign(key, hashes.SHA256())
    )
    crt, key_file = folder / "tls-echo.crt", folder / "tls-echo.key"
    crt.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    key_file.chmod(0o600)
    return crt, key_file, hashlib.sha256(cert.public_bytes(serialization.Encoding.DER)).hexdigest()


# --- processes -------------------------------------------------------------------------------


class Started:
    """A process whose stderr (and stdout) go to a log file in the temporary folder."""

    def __init__(self, name: str, args: list[str], folder: Path, env: dict | None = None) -> None:
        self.name = name
        self.log_path = folder / f"{name}.log"
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(
                args,
                cwd=ROOT,
                env=dict(os.environ, PYTHONUNBUFFERED="1", **(env or {})),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # a Ctrl-C in the terminal reaches only this script
            )

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait_for(
        self, pattern: re.Pattern, count: int = 1, timeout: float = READY_TIMEOUT
    ) -> list[re.Match]:
        deadline = time.monotonic() + timeout
        while True:
            found = [m for line in self.log().splitlines() if (m := pattern.search(line))]
            if len(found) >= count:
                return found
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(
                    f"{self.name}: {pattern.pattern!r} not seen; log:\n{self.tail()}"
                )
            time.sleep(0.05)

    def tail(self, lines: int = 30) -> str:
        """The last ``lines`` lines of the log but access log lines (edge's /ready polls)."""
        kept = [line for line in self.log().splitlines() if not ACCESS_LOG_RE.match(line)]
        return "\n".join(kept[-lines:])

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)


def whoami(name: str, folder: Path, *, udp: bool = False) -> tuple[Started, dict[str, int]]:
    args = [sys.executable, "-m", "edge", "whoami", "--name", name, "--http", f"{HOST}:0"]
    if udp:
        args += ["--udp", f"{HOST}:0"]
    proc = Started(f"whoami-{name}", args, folder)
    found = proc.wait_for(WHOAMI_RE, count=2 if udp else 1)
    return proc, {m.group(2): int(m.group(4)) for m in found}


def configurations(folder: Path, ports: dict[str, int], workers: int) -> Path:
    """Write static.yaml and dynamic.yaml (YAML is a superset of JSON); the static file's path."""

    def lb_url(name: str) -> dict:
        return {"loadBalancer": {"servers": [{"url": f"http://{HOST}:{ports[name]}"}]}}

    def lb_address(port: int) -> dict:
        return {"loadBalancer": {"servers": [{"address": f"{HOST}:{port}"}]}}

    dynamic = {
        "http": {
            "routers": {
                "web": {
                    "rule": "Host(`web.example.test`)",
                    "service": "web",
                    "entryPoints": ["web"],
                },
                "web-api": {
                    "rule": "Host(`web.example.test`) && PathPrefix(`/api`)",
                    "service": "api",
                    "entryPoints": ["web"],
                },
                "api": {
                    "rule": "Host(`api.example.test`)",
                    "service": "api",
                    "entryPoints": ["web"],
                },
            },
            "services": {name: lb_url(name) for name in BACKENDS},
        },
        "tcp": {
            "routers": {
                "echo": {
                    "rule": f"HostSNI(`{TLS_NAME}`)",
                    "service": "tls-echo",
                    "entryPoints": ["websecure"],
                    "tls": {"passthrough": True},
                }
            },
            "services": {"tls-echo": lb_address(ports["tls-echo"])},
        },
        "udp": {
            "routers": {"echo": {"service": "udp-echo", "entryPoints": ["udp"]}},
            "services": {"udp-echo": lb_address(ports["udp-echo"])},
        },
    }
    static = {
        "entryPoints": {
            "web": {"address": f"{HOST}:0"},
            "websecure": {"address": f"{HOST}:0"},
            "udp": {"address": f"{HOST}:0/udp"},
            "ping": {"address": f"{HOST}:0"},
        },
        "providers": {"file": {"filename": "dynamic.yaml", "watch": False}},
        "ping": {"entryPoint": "ping"},
        "log": {"level": "INFO"},
        "workers": workers,
    }
    (folder / "dynamic.yaml").write_text(json.dumps(dynamic, indent=2))
    (folder / "static.yaml").write_text(json.dumps(static, indent=2))
    return folder / "static.yaml"


def cpu_seconds(pid: int) -> float:
    """User + system CPU of ``pid`` and its descendants (edge's workers), from /proc; 0 elsewhere."""
    children: dict[int, list[int]] = {}
    stats: dict[int, list[str]] = {}
    for entry in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            fields = entry.read_text().rpartition(")")[2].split()
            stats[int(entry.parent.name)] = fields
            children.setdefault(int(fields[1]), []).append(int(entry.parent.name))
    total, todo = 0, [pid]
    while todo:
        p = todo.pop()
        if p in stats:
            total += int(stats[p][11]) + int(stats[p][12])  # utime, stime
        todo += children.get(p, [])
    return total / os.sysconf("SC_CLK_TCK")


def wait_ready(port: int, edge: Started) -> None:
    deadline = time.monotonic() + READY_TIMEOUT
    while time.monotonic() < deadline:
        if edge.proc.poll() is not None:
            break
        conn = http.client.HTTPConnection(HOST, port, timeout=2)
        try:
            conn.request("GET", "/ready")
            if conn.getresponse().status == 200:
                return
        except OSError:
            pass
        finally:
            conn.close()
        time.sleep(0.1)
    raise RuntimeError(f"edge never answered /ready 200; log:\n{edge.tail()}")


# --- results ---------------------------------------------------------------------------------


def summarize(stats_csv: Path) -> tuple[list[str], list[str]]:
    """Lines for the report (one per request type, then the total) and the problems found."""
    with open(stats_csv, newline="") as f:
        rows = list(csv.DictReader(f))
    lines = [
        f"{'type':<5} {'name':<28} {'requests':>9} {'failures':>8} {'req/s':>8} {'p50 ms':>7} {'p95 ms':>7}"
    ]
    for row in rows:
        kind = row["Type"] or "all"
        lines.append(
            f"{kind:<5} {row['Name'][:28]:<28} {row['Request Count']:>9} {row['Failure Count']:>8} "
            f"{float(row['Requests/s']):>8.1f} {row['50%']:>7} {row['95%']:>7}"
        )
    problems = []
    for kind in USER_TYPES:
        of_kind = [r for r in rows if r["Type"] == kind]
        if sum(int(r["Request Count"]) for r in of_kind) == 0:
            problems.append(f"no {kind} requests")
        if failed := sum(int(r["Failure Count"]) for r in of_kind):
            problems.append(f"{failed} {kind} failures")
    return lines, problems


# --- the file set-up -------------------------------------------------------------------------


@dataclass(frozen=True)
class Target:
    """Where the users go once edge is ready: its entry points' ports and locustfile.py's
    EDGE_LOCUST_* variables."""

    listening: dict[str, int]
    env: dict[str, str]


def start_edge(static: Path, folder: Path, started: list[Started], ping: str) -> dict[str, int]:
    """``edge run`` on ``static`` until ``/ready`` answers 200; its entry points' ports."""
    entry_points = len(json.loads(static.read_text())["entryPoints"])
    edge = Started("edge", [sys.executable, "-m", "edge", "run", "--config", str(static)], folder)
    started.append(edge)
    found = edge.wait_for(LISTEN_RE, count=entry_points)
    listening = {m.group(1): int(m.group(3)) for m in found}
    wait_ready(listening[ping], edge)
    return listening


def file_setup(args: argparse.Namespace, folder: Path, started: list[Started]) -> Target:
    crt, key, fingerprint = make_certificate(folder)
    ports: dict[str, int] = {}
    for name in BACKENDS:
        proc, bound = whoami(name, folder, udp=name == "web")
        started.append(proc)
        ports[name] = bound["http"]
        if "udp" in bound:
            ports["udp-echo"] = bound["udp"]
    echo = Started(
        "tls-echo",
        [sys.executable, "-m", "edge.whoami", "--name", "tls-echo", "--tls", f"{HOST}:0",
         "--cert", str(crt), "--key", str(key)],
        folder,
    )  # fmt: skip
    started.append(echo)
    ports["tls-echo"] = int(echo.wait_for(WHOAMI_RE)[0].group(4))
    listening = start_edge(configurations(folder, ports, args.workers), folder, started, "ping")
    return Target(
        listening,
        {
            "EDGE_LOCUST_HTTP_ROUTES": HTTP_ROUTES,
            "EDGE_LOCUST_TLS_ADDR": f"{HOST}:{listening['websecure']}",
            "EDGE_LOCUST_TLS_SNI": TLS_NAME,
            "EDGE_LOCUST_TLS_SHA256": fingerprint,
            "EDGE_LOCUST_UDP_ADDR": f"{HOST}:{listening['udp']}",
        },
    )


# --- the cluster set-up ----------------------------------------------------------------------

K8S = ROOT / "k8s"
EXAMPLES = K8S / "examples"
TOKEN = "locust-local"
# Kinds of k8s/examples/ the emulator does not serve (edge never reads them): the
# namespace, and the Deployments, whose pods run here as processes.
RUN_HERE = {"Namespace", "Deployment"}
# What k8s/examples/ routes, by name: the HTTP user's routes (the Ingress', and the
# IngressRoute's, through its stripPrefix Middleware), the passthrough route's server
# name and the Secret its backend presents, the terminated route's and the Secret edge
# presents.
CLUSTER_HTTP_ROUTES = HTTP_ROUTES + " whoami.example.test/whoami/=web"
MIDDLEWARE_ROUTE = ("whoami.example.test", "/whoami/hello", "/hello", "web")
PASSTHROUGH = ("echo.example.test", "edge-demo", "echo-tls")
TERMINATED = ("tcp.example.test", "edge-demo", "tcp-tls")
LISTEN_FLAGS = {"--http": "http", "--tcp": "tcp", "--tls": "tls", "--udp": "udp"}
POD_ADDRESS_RE = re.compile(r"^0\.0\.0\.0:(\d+)$")
CHECK_TIMEOUT = 10.0


def yaml_documents(path: Path) -> list[dict]:
    import yaml

    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def kustomized(folder: Path) -> list[dict]:
    """The objects of the files ``folder``'s kustomization lists, in its order; a listed
    folder by its own kustomization."""
    (kustomization,) = yaml_documents(folder / "kustomization.yaml")
    objects = []
    for name in kustomization["resources"]:
        path = folder / name
        objects += kustomized(path) if path.is_dir() else yaml_documents(path)
    return objects


def example_objects() -> list[dict]:
    """k8s/ingressclass.yaml's IngressClass, then the objects of k8s/examples/ (crd/
    included) as its kustomization lists them."""
    return yaml_documents(K8S / "ingressclass.yaml") + kustomized(EXAMPLES)


def secret_files(secret: dict) -> dict[str, bytes]:
    """A Secret's keys and values, from ``data`` (base64) and ``stringData``."""
    files = {k: base64.b64decode(v) for k, v in (secret.get("data") or {}).items()}
    files.update((k, v.encode()) for k, v in (secret.get("stringData") or {}).items())
    return files


def as_stored(obj: dict) -> dict:
    """``obj`` as the API server stores it: a Secret's ``stringData`` merged into ``data``
    (base64), which is all a reader sees."""
    if obj["kind"] != "Secret" or "stringData" not in obj:
        return obj
    stored = {k: v for k, v in obj.items() if k != "stringData"}
    stored["data"] = {k: base64.b64encode(v).decode() for k, v in secret_files(obj).items()}
    return stored


@dataclass(frozen=True)
class Pod:
    """A Deployment's replica running here: its labels, its container ports by name and
    number, and the loopback port each container port listens on."""

    namespace: str
    labels: dict[str, str]
    named: dict[str, int]
    local: dict[int, int]


def run_pod(
    deployment: dict, replica: int, secrets: dict[tuple[str, str], dict], folder: Path
) -> tuple[Started, Pod]:
    """One replica of ``deployment`` as a process: the container's command (the image's
    entrypoint, ``edge``, when it names none; ``python`` is this interpreter) and args,
    each listening address ``0.0.0.0:PORT`` moved to 127.0.0.1 port 0 and each file of a
    mounted Secret to a copy in ``folder``."""
    namespace = deployment["metadata"]["namespace"]
    name = f"{deployment['metadata']['name']}-{replica}"
    template = deployment["spec"]["template"]
    (container,) = template["spec"]["containers"]
    volumes = {}
    for volume in template["spec"].get("volumes", []):
        if "secret" not in volume:
            raise RuntimeError(f"{name}: volume {volume['name']}: only Secrets are copied here")
        local = folder / name / volume["name"]
        local.mkdir(parents=True)
        secret = secrets[(namespace, volume["secret"]["secretName"])]
        for key, value in secret_files(secret).items():
            (local / key).write_bytes(value)
        volumes[volume["name"]] = local
    mounts = {m["mountPath"]: volumes[m["name"]] for m in container.get("volumeMounts", [])}

    command = container.get("command") or ["edge"]
    program = {"edge": [sys.executable, "-m", "edge"], "python": [sys.executable]}[command[0]]
    listens: list[tuple[str, int]] = []  # (kind, container port), in the order given
    args = []
    for flag, arg in zip(["", *container["args"]], container["args"], strict=False):
        if m := POD_ADDRESS_RE.match(arg):
            listens.append((LISTEN_FLAGS[flag], int(m.group(1))))
            arg = f"{HOST}:0"
        for mount, local in mounts.items():
            if arg.startswith(mount + "/"):
                arg = str(local / arg[len(mount) + 1 :])
        args.append(arg)
    proc = Started(name, [*program, *command[1:], *args], folder)
    # whoami says where it listens by kind (http, tcp, tls, udp), each in the order given
    bound: dict[str, list[int]] = {}
    for m in proc.wait_for(WHOAMI_RE, count=len(listens)):
        bound.setdefault(m.group(2), []).append(int(m.group(4)))
    local = {port: bound[kind].pop(0) for kind, port in listens}
    named = {p["name"]: p["containerPort"] for p in container.get("ports", []) if "name" in p}
    return proc, Pod(namespace, dict(template["metadata"].get("labels", {})), named, local)


def endpoint_slices(service: dict, pods: list[Pod]) -> list[dict]:
    """The EndpointSlices of ``service`` over the pods it selects: one per pod, since each
    listens on loopback ports of its own, with the Service's ports resolved to them."""
    meta = service["metadata"]
    selector = service["spec"].get("selector") or {}
    chosen = [
        pod
        for pod in pods
        if pod.namespace == meta["namespace"]
        and selector
        and all(pod.labels.get(k) == v for k, v in selector.items())
    ]
    slices = []
    for i, pod in enumerate(chosen):
        ports = []
        for port in service["spec"]["ports"]:
            target = port.get("targetPort", port["port"])
            container_port = pod.named[target] if isinstance(target, str) else target
            ports.append(
                {"name": port.get("name", ""), "port": pod.local[container_port],
                 "protocol": port.get("protocol", "TCP")}
            )  # fmt: skip
        slices.append(
            {
                "apiVersion": "discovery.k8s.io/v1",
                "kind": "EndpointSlice",
                "metadata": {
                    "name": f"{meta['name']}-{i}",
                    "namespace": meta["namespace"],
                    "labels": {"kubernetes.io/service-name": meta["name"]},
                },
                "addressType": "IPv4",
                "endpoints": [
                    {"addresses": [HOST],
                     "conditions": {"ready": True, "serving": True, "terminating": False}}
                ],
                "ports": ports,
            }
        )  # fmt: skip
    return slices


def cluster_static(folder: Path, api_server: str, workers: int) -> Path:
    """k8s/configmap.yaml's edge.yaml, changed where it must be here (see the module's
    docstring); the written file's path."""
    import yaml

    (configmap,) = [d for d in yaml_documents(K8S / "configmap.yaml") if d["kind"] == "ConfigMap"]
    static = yaml.safe_load(configmap["data"]["edge.yaml"])
    for entry_point in static["entryPoints"].values():
        udp = entry_point["address"].endswith("/udp")
        entry_point["address"] = f"{HOST}:0" + ("/udp" if udp else "")
        life = entry_point.get("transport", {}).get("lifeCycle")
        if life:  # no load balancer to leave, and nothing in flight at the stop
            life["requestAcceptGraceTimeout"] = "0s"
    for name, provider in static["providers"].items():
        if name.startswith("kubernetes"):
            provider.update(endpoint=api_server, token=TOKEN)
    static["workers"] = workers
    path = folder / "static.yaml"
    path.write_text(json.dumps(static, indent=2))
    return path


def fingerprint_of(pem: bytes) -> str:
    return hashlib.sha256(ssl.PEM_cert_to_DER_cert(pem.decode())).hexdigest()


def check_middleware_route(port: int) -> str:
    """The IngressRoute's request reaches its backend with the Middleware's prefix gone."""
    host, path, stripped, backend = MIDDLEWARE_ROUTE
    conn = http.client.HTTPConnection(HOST, port, timeout=CHECK_TIMEOUT)
    try:
        conn.request("GET", path, headers={"Host": host})
        resp = conn.getresponse()
        body = resp.read()
    finally:
        conn.close()
    if resp.status != 200:
        raise RuntimeError(f"GET {host}{path}: status {resp.status}, expected 200")
    answer = json.loads(body)
    if (answer["name"], answer["path"]) != (backend, stripped):
        raise RuntimeError(
            f"GET {host}{path}: reached {answer['name']} with path {answer['path']}, "
            f"expected {backend} with {stripped} (the Middleware's stripPrefix)"
        )
    return f"{host}{path} -> {backend} {stripped} (stripPrefix applied)"


def check_terminated_route(port: int, fingerprint: str) -> str:
    """edge terminates TLS for the IngressRouteTCP with ``tls.secretName``: the client sees
    that Secret's certificate, and the echo behind answers in plain TCP."""
    sni = TERMINATED[0]
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE  # the pinned fingerprint is the check
    line = os.urandom(8).hex().encode() + b"\n"
    with (
        socket.create_connection((HOST, port), timeout=CHECK_TIMEOUT) as raw,
        context.wrap_socket(raw, server_hostname=sni) as tls,
    ):
        der = tls.getpeercert(binary_form=True) or b""
        if hashlib.sha256(der).hexdigest() != fingerprint:
            raise RuntimeError(f"TLS {sni}: the certificate is not the Secret {TERMINATED[2]}'s")
        tls.sendall(line)
        echoed = b""
        while len(echoed) < len(line) and (chunk := tls.recv(len(line) - len(echoed))):
            echoed += chunk
    if echoed != line:
        raise RuntimeError(f"TLS {sni}: echoed {echoed!r}, sent {line!r}")
    return f"{sni} -> terminated with the Secret {TERMINATED[2]}'s certificate, echoed"


def checked(check: Callable[[], str]) -> str:
    """``check``'s line, retried (bounded) while it fails: edge may still be connecting."""
    deadline = time.monotonic() + CHECK_TIMEOUT
    while True:
        try:
            return check()
        except (OSError, RuntimeError, ValueError, KeyError) as exc:
            if time.monotonic() > deadline:
                raise RuntimeError(f"check failed: {exc}") from exc
            time.sleep(0.2)


def cluster_setup(
    args: argparse.Namespace, folder: Path, started: list[Started], stack: contextlib.ExitStack
) -> Target:
    sys.path.insert(0, str(ROOT))
    from tests.kube.emulator import KINDS, Emulator

    served = {kind.kind for kind in KINDS}
    objects = example_objects()
    unknown = {o["kind"] for o in objects} - served - RUN_HERE
    if unknown:
        raise RuntimeError(f"k8s/examples/: kinds neither served nor run here: {sorted(unknown)}")
    secrets = {
        (o["metadata"]["namespace"], o["metadata"]["name"]): o
        for o in objects
        if o["kind"] == "Secret"
    }
    pods: list[Pod] = []
    for deployment in (o for o in objects if o["kind"] == "Deployment"):
        for replica in range(deployment["spec"].get("replicas", 1)):
            proc, pod = run_pod(deployment, replica, secrets, folder)
            started.append(proc)
            pods.append(pod)

    emu = stack.enter_context(Emulator(token=TOKEN))
    for obj in objects:
        if obj["kind"] in served:
            emu.create(as_stored(obj))
        if obj["kind"] == "Service":
            for endpoint_slice in endpoint_slices(obj, pods):
                emu.create(endpoint_slice)
    print(
        f"API server emulator {emu.url}: {len(emu.list('EndpointSlice'))} EndpointSlices and "
        + ", ".join(f"{n} {k}" for k, n in sorted(Counter(o["kind"] for o in objects).items())),
        flush=True,
    )

    static = cluster_static(folder, emu.url, args.workers)
    listening = start_edge(static, folder, started, "traefik")
    sni, namespace, secret = TERMINATED
    terminated = fingerprint_of(secret_files(secrets[(namespace, secret)])["tls.crt"])
    for line in (
        checked(lambda: check_middleware_route(listening["web"])),
        checked(lambda: check_terminated_route(listening["websecure"], terminated)),
    ):
        print(f"checked: {line}", flush=True)
    sni, namespace, secret = PASSTHROUGH
    return Target(
        listening,
        {
            "EDGE_LOCUST_HTTP_ROUTES": CLUSTER_HTTP_ROUTES,
            "EDGE_LOCUST_TLS_ADDR": f"{HOST}:{listening['websecure']}",
            "EDGE_LOCUST_TLS_SNI": sni,
            "EDGE_LOCUST_TLS_SHA256": fingerprint_of(
                secret_files(secrets[(namespace, secret)])["tls.crt"]
            ),
            "EDGE_LOCUST_UDP_ADDR": f"{HOST}:{listening['udp']}",
        },
    )


# --- the run ---------------------------------------------------------------------------------


def run(args: argparse.Namespace) -> int:
    if importlib.util.find_spec("locust") is None:
        print("locust is not installed: .venv/bin/pip install -e '.[load]'", file=sys.stderr)
        return 2
    csv_prefix = Path(
        args.csv or HERE / "results" / f"locust-{dt.datetime.now():%Y%m%d-%H%M%S}"
    ).resolve()
    csv_prefix.parent.mkdir(parents=True, exist_ok=True)
    folder = Path(tempfile.mkdtemp(prefix="edge-locust-"))
    started: list[Started] = []
    with contextlib.ExitStack() as stack:
        try:
            if args.cluster:
                target = cluster_setup(args, folder, started, stack)
            else:
                target = file_setup(args, folder, started)
            return load(args, target, started, folder, csv_prefix)
        finally:
            for proc in reversed(started):
                proc.stop()
            if args.keep_tmp:
                print(f"kept {folder}")
            else:
                shutil.rmtree(folder, ignore_errors=True)


def load(
    args: argparse.Namespace, target: Target, started: list[Started], folder: Path, csv_prefix: Path
) -> int:
    """Run the three users against ``target``; report; the exit status."""
    listening, env = target.listening, target.env
    command = [
        sys.executable, "-m", "locust",
        "-f", str(HERE / "locustfile.py"),
        "--headless",
        "--users", str(args.users),
        "--spawn-rate", str(args.spawn_rate or args.users),
        "--run-time", f"{args.duration}s",
        "--stop-timeout", "5",
        "--host", f"http://{HOST}:{listening['web']}",
        "--csv", str(csv_prefix),
        "--only-summary",
        *args.locust_args,
    ]  # fmt: skip
    print(f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs", flush=True)
    print(
        f"edge: web :{listening['web']}, websecure :{listening['websecure']}, "
        f"udp :{listening['udp']}; logs in {folder}",
        flush=True,
    )
    print("$", " ".join(f"{k}={v}" for k, v in env.items()), " ".join(command[1:]), flush=True)
    before = {proc.name: cpu_seconds(proc.proc.pid) for proc in started}
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    wall = time.monotonic()
    locust = subprocess.run(
        command, cwd=ROOT, env=dict(os.environ, **env), timeout=args.duration + 120, check=False
    )
    wall = time.monotonic() - wall
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    used = {proc.name: cpu_seconds(proc.proc.pid) - before[proc.name] for proc in started}
    used["locust"] = after.ru_utime + after.ru_stime - children.ru_utime - children.ru_stime
    cpu_line = ", ".join(f"{name} {sec:.1f}" for name, sec in used.items())
    for proc in started:
        if proc.proc.poll() is not None:
            print(
                f"{proc.name} exited during the run ({proc.proc.returncode}); log:\n{proc.tail()}"
            )
            return 1
    stats = Path(f"{csv_prefix}_stats.csv")
    if not stats.exists():
        print(f"locust wrote no {stats} (exit status {locust.returncode})", file=sys.stderr)
        return 1
    lines, problems = summarize(stats)
    print("\n".join(["", f"CSV: {csv_prefix}_*.csv", *lines]))
    print(f"CPU seconds in {wall:.0f} s of locust ({os.cpu_count()} CPUs): {cpu_line}")
    if problems:
        print("FAILED: " + "; ".join(problems))
        return 1
    print(
        f"OK: every user type made requests, none failed (locust exit status {locust.returncode})"
    )
    return 0 if locust.returncode == 0 else 1


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    locust_args: list[str] = []
    if "--" in argv:
        at = argv.index("--")
        argv, locust_args = argv[:at], argv[at + 1 :]
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--duration", type=int, default=60, help="seconds of load (default 60)")
    p.add_argument(
        "--users",
        type=int,
        default=30,
        help="users in all, split evenly over the three kinds (default 30)",
    )
    p.add_argument(
        "--spawn-rate",
        type=float,
        default=0,
        help="users started per second (default: all at once)",
    )
    p.add_argument("--csv", help="CSV prefix (default loadtest/results/locust-<time>)")
    p.add_argument("--workers", type=int, default=1, help="edge's workers (default 1)")
    p.add_argument(
        "--cluster",
        action="store_true",
        help="k8s/examples/ through the API server emulator, edge on k8s/configmap.yaml",
    )
    p.add_argument(
        "--keep-tmp", action="store_true", help="keep the configurations, certificate and logs"
    )
    args = p.parse_args(argv)
    args.locust_args = locust_args

    def terminate(_sig, _frame):
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, terminate)
    try:
        return run(args)
    except KeyboardInterrupt:
        print("interrupted; everything stopped", file=sys.stderr)
        return 130
    except RuntimeError as exc:
        print(exc, file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
