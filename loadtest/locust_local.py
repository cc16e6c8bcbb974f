"""Run loadtest/locustfile.py headless against a local edge, then stop everything.

Run: ``.venv/bin/python loadtest/locust_local.py [--duration 60] [--users 30]
[--csv PREFIX] [--workers N] [--keep-tmp] [-- LOCUST_ARGS...]``
(locust comes with the ``load`` extra: ``.venv/bin/pip install -e '.[load]'``).

In a temporary folder it writes a static and a dynamic configuration and a
self-signed certificate (EC P-256, for ``echo.example.test``), and starts, all on
127.0.0.1 with ports the OS picks:

- two ``edge whoami`` backends: ``web`` (HTTP, and the UDP echo) and ``api`` (HTTP);
- a TLS echo server with that certificate (``locust_local.py tls-echo``: asyncio,
  echoes what it reads);
- ``edge run`` with the entry points of the kind cluster's edge node: ``web``
  (HTTP, the routes of k8s/examples' Ingress: ``Host(`web.example.test`)`` -> web,
  split by ``PathPrefix(`/api`)`` -> api; ``Host(`api.example.test`)`` -> api),
  ``websecure`` (TLS passthrough: ``HostSNI(`echo.example.test`)`` -> the TLS echo),
  ``udp`` (-> web's UDP echo) and ``ping``.

Once ``/ready`` answers 200 it runs locust headless with all three users at once
(the environment variables of locustfile.py point them at those ports, and the
expected certificate fingerprint is the one generated here), writes locust's CSV
files (``PREFIX_stats.csv``, ``_failures.csv``, ``_exceptions.csv``,
``_stats_history.csv``), prints one line per request type, and stops everything
(SIGTERM, then SIGKILL). Exit status 0 only when every user type made requests
and none failed.
"""

from __future__ import annotations

import argparse
import asyncio
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
import ssl
import subprocess
import sys
import tempfile
import time
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

WHOAMI_RE = re.compile(r"whoami (\S+): (http|tcp|udp) on ([0-9a-f.:]+):(\d+)")
LISTEN_RE = re.compile(r"entrypoint (\S+): listening on \[?([0-9a-f.:]+?)\]?:(\d+)")
TLS_ECHO_RE = re.compile(r"tls-echo: listening on ([0-9a-f.:]+):(\d+)")


# --- the TLS backend -------------------------------------------------------------------------


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


async def tls_echo(cert: str, key: str, listen: str) -> None:
    """Serve TLS on ``listen`` and echo every byte until the client closes; stop on SIGTERM."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)

    async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(ConnectionError, ssl.SSLError, OSError):
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        writer.close()
        with contextlib.suppress(ConnectionError, ssl.SSLError, OSError):
            await writer.wait_closed()

    host, _, port = listen.rpartition(":")
    server = await asyncio.start_server(echo, host, int(port), ssl=context, backlog=1024)
    bound = server.sockets[0].getsockname()
    print(f"tls-echo: listening on {bound[0]}:{bound[1]}", file=sys.stderr, flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    async with server:
        await stop.wait()


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
        return "\n".join(self.log().splitlines()[-lines:])

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
    try:
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
            [
                sys.executable,
                __file__,
                "tls-echo",
                "--cert",
                str(crt),
                "--key",
                str(key),
                "--listen",
                f"{HOST}:0",
            ],
            folder,
        )
        started.append(echo)
        ports["tls-echo"] = int(echo.wait_for(TLS_ECHO_RE)[0].group(2))

        static = configurations(folder, ports, args.workers)
        edge = Started(
            "edge", [sys.executable, "-m", "edge", "run", "--config", str(static)], folder
        )
        started.append(edge)
        listening = {m.group(1): int(m.group(3)) for m in edge.wait_for(LISTEN_RE, count=4)}
        wait_ready(listening["ping"], edge)

        env = {
            "EDGE_LOCUST_HTTP_ROUTES": HTTP_ROUTES,
            "EDGE_LOCUST_TLS_ADDR": f"{HOST}:{listening['websecure']}",
            "EDGE_LOCUST_TLS_SNI": TLS_NAME,
            "EDGE_LOCUST_TLS_SHA256": fingerprint,
            "EDGE_LOCUST_UDP_ADDR": f"{HOST}:{listening['udp']}",
        }
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
    finally:
        for proc in reversed(started):
            proc.stop()
        if args.keep_tmp:
            print(f"kept {folder}")
        else:
            shutil.rmtree(folder, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["tls-echo"]:
        p = argparse.ArgumentParser(prog="locust_local.py tls-echo")
        p.add_argument("--cert", required=True)
        p.add_argument("--key", required=True)
        p.add_argument("--listen", default=f"{HOST}:0")
        a = p.parse_args(argv[1:])
        with contextlib.suppress(ImportError):
            import uvloop

            uvloop.run(tls_echo(a.cert, a.key, a.listen))
            return 0
        asyncio.run(tls_echo(a.cert, a.key, a.listen))
        return 0

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
