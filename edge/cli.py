"""The ``edge`` command: run, check, whoami, demo (and the hidden ``worker``).

Nothing imports this module; it only parses arguments and calls into the rest.
``edge worker --id K`` is what the supervisor (``workers: N``) starts; it is not for
people: it reads its orders from the supervisor's socketpair on stdin (edge.supervisor).
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import subprocess
import sys
from urllib.parse import urlsplit

import msgspec

from edge import __version__, whoami
from edge.errors import ConfigError

log = logging.getLogger("edge")


def _uvloop_run(coro):
    from edge.eventloop import run

    return run(coro)


def load_static(path: str, notices: list | None = None):
    """Load the static configuration; relative provider paths are resolved against its folder.

    ``notices``: the Traefik options edge lacks (:mod:`edge.config.loader`) go there.
    """
    from edge.config.loader import load_static as _load

    static = _load(path, notices)
    base = os.path.dirname(os.path.abspath(path))
    static = _static_paths(static, base)
    f = static.providers.file
    if f is not None:
        changes = {}
        if f.filename and not os.path.isabs(f.filename):
            changes["filename"] = os.path.join(base, f.filename)
        if f.directory and not os.path.isabs(f.directory):
            changes["directory"] = os.path.join(base, f.directory)
        if changes:
            providers = msgspec.structs.replace(
                static.providers, file=msgspec.structs.replace(f, **changes)
            )
            static = msgspec.structs.replace(static, providers=providers)
    return static


def _static_paths(static, base: str):
    """``static`` with the static transports' relative ``rootCAs`` joined to ``base``."""
    from edge.config.pem import PEM_MARK

    def joined(values: list[str]) -> list[str]:
        return [
            v if PEM_MARK in v or not v or os.path.isabs(v) else os.path.join(base, v)
            for v in values
        ]

    http, tcp = static.servers_transport, static.tcp_servers_transport
    if http is not None and http.root_cas:
        http = msgspec.structs.replace(http, root_cas=joined(http.root_cas))
    if tcp is not None and tcp.tls is not None and tcp.tls.root_cas:
        tls = msgspec.structs.replace(tcp.tls, root_cas=joined(tcp.tls.root_cas))
        tcp = msgspec.structs.replace(tcp, tls=tls)
    if http is static.servers_transport and tcp is static.tcp_servers_transport:
        return static
    return msgspec.structs.replace(static, servers_transport=http, tcp_servers_transport=tcp)


def _static_warnings(static) -> list[str]:
    """What the static configuration does that its user did not write."""
    if static.default_entry_point_added:
        return [
            "no entry point defined: serving on entry point http, address :80, "
            "as Traefik does (define entryPoints to choose)"
        ]
    return []


def _notice_text(notice) -> str:
    """An option edge lacks, said the way it is: one edge will implement says what edge
    does meanwhile (:data:`edge.config.static.NOT_YET_IMPLEMENTED`)."""
    from edge.config.static import NOT_YET_IMPLEMENTED

    meanwhile = NOT_YET_IMPLEMENTED.get(notice.path.removeprefix("$.").lower())
    if meanwhile is None:
        return str(notice)
    where = f"{notice.source}: " if notice.source else ""
    return f"{where}{notice.path}: {meanwhile} (ignored)"


def cmd_run(args: argparse.Namespace) -> int:
    from edge.logs import setup_logging

    notices: list = []
    static = load_static(args.config, notices)
    setup_logging(static.log)
    log.info("edge %s", __version__)
    if not _report_static(notices):
        return 1
    for warning in _static_warnings(static):
        log.warning("static configuration: %s", warning)
    if static.core.default_rule_syntax == "v2":
        log.warning(
            "core.defaultRuleSyntax: v2: routers without ruleSyntax read Traefik v2 rules "
            "(deprecated since Traefik v3; rewrite them in v3 syntax)"
        )
    workers = static.worker_count
    if workers > 1:
        from edge.supervisor import run_supervisor

        _uvloop_run(run_supervisor(static, workers=workers, parser=args.http_parser))
    else:
        _uvloop_run(_run_single(static, args.http_parser))
    return 0


async def _run_single(static, parser: str | None) -> None:
    """One process: edge.app's Edge, with ``api@internal`` routes served (``api``)."""
    from edge.app import Edge, serve
    from edge.entrypoints.internal import attach_api

    app = Edge(static, parser=parser)
    attach_api(app.dataplane, static)
    await serve(app)


def cmd_worker(args: argparse.Namespace) -> int:
    from edge.supervisor import ignore_group_signals, run_worker, tag_worker_logs

    ignore_group_signals()
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    tag_worker_logs(args.id)
    return _uvloop_run(run_worker(args.id))


def _report_static(notices: list) -> bool:
    """Log the Traefik options of the static configuration edge lacks; False when one
    must stop the start (what holds it would run without it)."""
    for notice in notices:
        if notice.ignored:
            log.warning("static configuration: %s", _notice_text(notice))
        else:
            log.error("static configuration: %s", notice)
    if any(not n.ignored for n in notices):
        log.error("cannot start: remove the options this version of edge does not support")
        return False
    return True


def _load_dynamic(static, notices: list | None = None) -> tuple[dict, list[str]]:
    """Each provider's configuration read once, for ``check`` and ``demo``; a directory's
    files that cannot be served are left out, each with its error."""
    from edge.providers.file import load_file_provider

    configs = {}
    errors: list[str] = []
    f = static.providers.file
    if f is not None:
        failed: list[ConfigError] = []
        try:
            configs["file"] = load_file_provider(
                filename=f.filename or None,
                directory=f.directory or None,
                errors=failed,
                notices=notices,
            )
        except ConfigError as exc:
            failed.append(exc)
        errors += [str(exc) for exc in failed]
    return configs, errors


def _check_kubernetes(static, configs: dict) -> bool:
    """List the cluster once per Kubernetes provider (kubernetesIngress, kubernetesCRD,
    kubernetesGateway, kubernetesIngressNGINX), print every route left out with its reason, add each converted
    configuration to ``configs``; True when something is wrong."""
    ingress = static.providers.kubernetes_ingress
    crd = static.providers.kubernetes_crd
    gateway = static.providers.kubernetes_gateway
    nginx = static.providers.kubernetes_ingress_nginx
    if ingress is None and crd is None and gateway is None and nginx is None:
        return False
    from edge.providers.kubernetes.client import KubernetesError
    from edge.providers.kubernetes.crd import PROVIDER as CRD_PROVIDER
    from edge.providers.kubernetes.gateway import PROVIDER as GATEWAY_PROVIDER
    from edge.providers.kubernetes.gateway import EntryPointPort
    from edge.providers.kubernetes.gateway_provider import check_gateway_cluster
    from edge.providers.kubernetes.ingress_nginx import PROVIDER as NGINX_PROVIDER
    from edge.providers.kubernetes.provider import check_cluster, check_crd_cluster

    checks = []
    if ingress is not None:
        checks.append(("kubernetes", lambda: check_cluster(ingress)))
    if crd is not None:
        checks.append((CRD_PROVIDER, lambda: check_crd_cluster(crd)))
    if gateway is not None:
        # Listeners bind to the entry points by port, as in the running edge.
        ports = [
            EntryPointPort(name, ep.port, ep.protocol == "udp")
            for name, ep in static.entry_points.items()
        ]
        checks.append((GATEWAY_PROVIDER, lambda: check_gateway_cluster(gateway, ports)))
    if nginx is not None:
        from edge.providers.kubernetes.ingress_nginx_provider import check_cluster as check_nginx

        # tcp-/udp-services entries bind to the entry points by port, as in the running edge.
        nginx_ports = [
            EntryPointPort(name, ep.port, ep.protocol == "udp")
            for name, ep in static.entry_points.items()
        ]
        checks.append((NGINX_PROVIDER, lambda: check_nginx(nginx, nginx_ports)))
    wrong = False
    for name, check in checks:
        try:
            conversion = check()
        except (ConfigError, KubernetesError) as exc:
            print(f"{name}: {exc}")
            wrong = True
            continue
        configs[name] = conversion.configuration
        for problem in conversion.problems:
            print(f"{name}: {problem}: left out")
        wrong = wrong or bool(conversion.problems)
    return wrong


def cmd_check(args: argparse.Namespace) -> int:
    from edge.config.merge import merge
    from edge.config.runtime import build_runtime, check_tls, relative_files
    from edge.tls.certs import TLSCertificates

    notices: list = []
    try:
        static = load_static(args.config, notices)
    except ConfigError as exc:
        print(f"static configuration: {exc}")
        return 1
    for notice in notices:
        print(f"static configuration: {_notice_text(notice)}")
    for warning in _static_warnings(static):
        print(f"static configuration: {warning}")
    dynamic_notices: list = []
    configs, errors = _load_dynamic(static, dynamic_notices)
    for err in errors:
        print(f"dynamic configuration: {err}")
    for notice in dynamic_notices:
        print(f"dynamic configuration: {notice}")
    notices += dynamic_notices
    left_out = _check_kubernetes(static, configs)
    default_syntax = static.core.default_rule_syntax
    merged = merge(configs)
    runtime = build_runtime(
        merged, static.entry_point_protocols(), default_rule_syntax=default_syntax
    )
    # Relative certificate, key and CA paths are opened from the working directory, as
    # Traefik opens them: say which file each is here.
    for where, path in relative_files(merged):
        print(
            f"dynamic configuration: {where}: relative path {path!r} is read from the "
            f"working directory: {os.path.abspath(path)}"
        )
    # Certificates and TLS options as the data plane reads them: a broken file disables its routers.
    check_tls(runtime, TLSCertificates(runtime.tls))
    bad = bool(errors) or left_out or any(not n.ignored for n in notices)
    print(f"rule syntax: {default_syntax} unless a router says otherwise (core.defaultRuleSyntax)")
    for kind, table in (
        ("router", runtime.http_routers),
        ("service", runtime.http_services),
        ("middleware", runtime.http_middlewares),
        ("tcp router", runtime.tcp_routers),
        ("tcp service", runtime.tcp_services),
        ("udp router", runtime.udp_routers),
        ("udp service", runtime.udp_services),
    ):
        for name, info in sorted(table.items()):
            line = f"{kind} {name}: {info.status}"
            syntax = getattr(info, "rule_syntax", "")
            if syntax and syntax != default_syntax:
                line = f"{kind} {name} (rule syntax {syntax}): {info.status}"
            if info.errors:
                line += ": " + "; ".join(info.errors)
            if info.status == "disabled":
                bad = True
            print(line)
    from edge.api import served_protocols

    for ep_name, ep in sorted(static.entry_points.items()):
        protocols = served_protocols(ep_name, ep, runtime)
        if protocols is not None:
            line = f"entry point {ep_name}: {', '.join(protocols['http'])}"
            for options, alpn in protocols.get("tls", {}).items():
                line += f"; TLS options {options}: ALPN {', '.join(alpn) or 'none'}"
            print(line)
    print("configuration is invalid" if bad else "configuration is valid")
    return 1 if bad else 0


def cmd_demo(args: argparse.Namespace) -> int:
    """Start one ``edge whoami`` per loopback server of the dynamic configuration, then edge.

    Ctrl-C stops edge first, then the backends: the terminal sends SIGINT to its whole
    foreground process group, so the backends run in a process group of their own and
    get SIGTERM once edge has drained (its in-flight requests answered) and stopped.
    """
    static = load_static(args.config)
    configs, errors = _load_dynamic(static)
    if errors:
        for err in errors:
            print(err, file=sys.stderr)
        return 1
    backends: dict[str, str] = {}
    for conf in configs.values():
        if conf.http is None:
            continue
        for svc_name, svc in conf.http.services.items():
            if svc.load_balancer is None:
                continue
            for i, server in enumerate(svc.load_balancer.servers):
                parts = urlsplit(server.url)
                if parts.hostname in ("127.0.0.1", "localhost", "::1") and parts.port:
                    backends.setdefault(f"{parts.hostname}:{parts.port}", f"{svc_name}-{i + 1}")
    procs = []
    for addr, name in backends.items():
        procs.append(
            subprocess.Popen(
                [sys.executable, "-m", "edge", "whoami", "--name", name, "--http", addr],
                process_group=0,  # out of the terminal's group: Ctrl-C reaches edge alone
            )
        )
    try:
        _wait_listening(backends, timeout=10.0)
        return cmd_run(args)
    finally:
        for p in procs:
            p.send_signal(signal.SIGTERM)
        for p in procs:
            try:
                p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                p.kill()


def _wait_listening(addresses, timeout: float) -> None:
    """Block until every ``host:port`` accepts connections (bounded by ``timeout``)."""
    import socket
    import time

    deadline = time.monotonic() + timeout
    for addr in addresses:
        host, _, port = addr.rpartition(":")
        while True:
            try:
                socket.create_connection((host.strip("[]"), int(port)), timeout=0.5).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    print(f"edge demo: backend {addr} did not start", file=sys.stderr)
                    return
                time.sleep(0.05)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="edge", description="A Kubernetes edge router and ingress controller."
    )
    parser.add_argument("--version", action="version", version=f"edge {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="{run,check,whoami,demo}")

    run = sub.add_parser("run", help="serve with a static configuration")
    run.add_argument(
        "--config", "-c", required=True, help="static configuration file (YAML or TOML)"
    )
    run.add_argument(
        "--http-parser",
        choices=["httptools", "h11"],
        default=None,
        help="override every entrypoint's HTTP parser",
    )
    run.set_defaults(func=cmd_run)

    check = sub.add_parser(
        "check", help="validate the static and dynamic configuration, start nothing"
    )
    check.add_argument("--config", "-c", required=True)
    check.set_defaults(func=cmd_check)

    who = sub.add_parser("whoami", help="a tiny echo backend")
    whoami.add_arguments(who)
    who.set_defaults(func=whoami.command)

    demo = sub.add_parser(
        "demo", help="run edge on the bundled demo configuration with its whoami backends"
    )
    demo.add_argument("--config", "-c", default="entrypoints/demo.yaml")
    demo.add_argument("--http-parser", choices=["httptools", "h11"], default=None)
    demo.set_defaults(func=cmd_demo)

    worker = sub.add_parser("worker")  # no help=: started by the supervisor, not listed
    worker.add_argument("--id", type=int, required=True, help="the worker's number, 1..N")
    worker.set_defaults(func=cmd_worker)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args) or 0
    except ConfigError as exc:
        print(f"edge: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
