"""The container image: built from the Dockerfile with podman, started, asked for /ping.

No registry is reachable here, so the base image is made from Debian's packages:
debootstrap (minbase, python3, python3-venv) into a folder, imported into podman as
``localhost/edge-test-base:bookworm`` and passed as the Dockerfile's BASE_IMAGE. The
host's CA bundle goes into that base with PIP_CERT pointing at it, so pip in the
build stage trusts what this machine trusts (a TLS-inspecting proxy, say). The base
is kept in podman's storage and reused; EDGE_TEST_BASE_IMAGE names another one.

The container runs as the DaemonSet runs it: in the host's network, UID 10001,
read-only root filesystem, every capability dropped but NET_BIND_SERVICE,
no-new-privileges, the ConfigMap's edge.yaml mounted at /etc/edge (its addresses
moved to free loopback ports, one below 1024), the Downward API's variables set, and
the in-memory API server (tests/kube/emulator.py) standing in for the cluster. It
must bind the port below 1024, answer /ping and /ready, and write the node's address
into an Ingress' status.

Two settings this machine needs, harmless elsewhere: the OCI runtime is runc when
installed (crun refuses this kernel's hybrid cgroup v1/v2 layout: "cgroups in hybrid
mode not supported"), and the open-file and process limits are set below the
machine's (podman raises them to its defaults otherwise, and this sandbox has no
CAP_SYS_RESOURCE: "error setting rlimit type 7: operation not permitted").
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import tempfile
import time
import tomllib
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
BASE_TAG = "localhost/edge-test-base:bookworm"
IMAGE_TAG = f"localhost/edge:test-{os.getpid()}"  # one per run: runs may overlap on a machine
MIRROR = os.environ.get("EDGE_DEBIAN_MIRROR", "http://deb.debian.org/debian")
HOST_CA = Path("/etc/ssl/certs/ca-certificates.crt")
LIMITS = ["--ulimit", "nofile=4096:4096", "--ulimit", "nproc=4096:4096"]
AS_THE_DAEMONSET = [
    "--read-only",
    "--user", "10001:10001",
    "--cap-drop", "ALL",
    "--cap-add", "NET_BIND_SERVICE",
    "--security-opt", "no-new-privileges",
]  # fmt: skip

pytestmark = [pytest.mark.deploy, pytest.mark.slow, pytest.mark.timeout(900)]


def _run(cmd, *, timeout=600, check=True, **kw) -> subprocess.CompletedProcess:
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, **kw)
    if check and out.returncode != 0:
        raise AssertionError(
            f"{' '.join(map(str, cmd))} exited {out.returncode}:\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}"
        )
    return out


@pytest.fixture(scope="module")
def podman() -> list[str]:
    """The podman command line (with the runtime this machine needs), or a skip with the reason."""
    exe = shutil.which("podman")
    if exe is None:
        pytest.skip("podman not installed: apt-get install podman runc (.ci/run does)")
    if os.geteuid() != 0:
        pytest.skip(
            "podman as root needed: the test binds :80 in the container and debootstraps its base"
        )
    cmd = [exe]
    if shutil.which("runc"):
        cmd += ["--runtime", "runc"]
    info = _run([*cmd, "info", "--format", "json"], check=False, timeout=60)
    if info.returncode != 0:
        pytest.skip(f"podman cannot run here: {info.stderr.strip()[-500:]}")
    probe = _run(
        [*cmd, "run", "--rm", *LIMITS, "--network", "none", _base_image(cmd), "true"], check=False
    )
    if probe.returncode != 0:
        pytest.skip(f"podman cannot start a container here: {probe.stderr.strip()[-500:]}")
    return cmd


def _base_image(podman: list[str]) -> str:
    """EDGE_TEST_BASE_IMAGE, or a Debian bookworm base made here with debootstrap (kept)."""
    if os.environ.get("EDGE_TEST_BASE_IMAGE"):
        return os.environ["EDGE_TEST_BASE_IMAGE"]
    if _run([*podman, "image", "exists", BASE_TAG], check=False).returncode == 0:
        return BASE_TAG
    if shutil.which("debootstrap") is None:
        pytest.skip("debootstrap not installed: apt-get install debootstrap (.ci/run does); "
                    "or set EDGE_TEST_BASE_IMAGE to a Python base image")  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="edge-base-", dir="/var/tmp") as tmp:
        rootfs = Path(tmp) / "rootfs"
        boot = _run(
            ["debootstrap", "--variant=minbase", "--include=python3,python3-venv", "bookworm", str(rootfs), MIRROR],
            check=False, timeout=900,
        )  # fmt: skip
        if boot.returncode != 0:
            pytest.skip(f"debootstrap from {MIRROR} failed: {boot.stdout.strip()[-500:]}")
        changes = ["--change", 'CMD ["/bin/bash"]']
        if HOST_CA.is_file():
            (rootfs / "etc/ssl/certs").mkdir(parents=True, exist_ok=True)
            shutil.copyfile(HOST_CA, rootfs / "etc/ssl/certs/ca-certificates.crt")
            changes += ["--change", "ENV PIP_CERT=/etc/ssl/certs/ca-certificates.crt"]
        for cache in ("var/cache/apt/archives", "var/lib/apt/lists"):
            for entry in (rootfs / cache).glob("*.deb" if "archives" in cache else "*_*"):
                entry.unlink()
        tar = subprocess.Popen(["tar", "-C", str(rootfs), "-c", "."], stdout=subprocess.PIPE)
        imported = subprocess.run([*podman, "import", *changes, "-", BASE_TAG], stdin=tar.stdout,
                                  capture_output=True, text=True, timeout=600)  # fmt: skip
        tar.stdout.close()
        assert tar.wait() == 0 and imported.returncode == 0, imported.stderr
    return BASE_TAG


@pytest.fixture(scope="module")
def image(podman):
    """The image, built once for the module and removed after it.

    --layers: the Dockerfile installs the pinned dependencies in a layer before it
    copies edge/, so a build after a change to edge alone reuses that layer (the pins
    change rarely). A build of another edge/ leaves its own layers behind as untagged
    images (``podman image prune`` clears them, the dependency layer with them).
    """
    started = time.monotonic()
    _run(
        [*podman, "build", "--format", "docker", "--layers", "--force-rm",
         "--build-arg", f"BASE_IMAGE={_base_image(podman)}", "--build-arg", "REVISION=test",
         "--tag", IMAGE_TAG, str(ROOT)],
        timeout=900,
    )  # fmt: skip
    print(f"image built in {time.monotonic() - started:.0f} s")
    yield IMAGE_TAG
    _run([*podman, "rmi", "--force", IMAGE_TAG], check=False)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get(url: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=2) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def test_image_metadata(podman, image):
    (info,) = json.loads(_run([*podman, "image", "inspect", image]).stdout)
    config = info["Config"]
    assert config["User"] == "10001:10001"
    assert config["Entrypoint"] == ["edge"]
    assert config["Cmd"] == ["run", "--config", "/etc/edge/edge.yaml"]
    # podman shows the docker-format HEALTHCHECK beside Config, not in it
    healthcheck = info.get("Healthcheck") or config.get("Healthcheck")
    assert "/ping" in " ".join(healthcheck["Test"])
    labels = config["Labels"]
    assert labels["org.opencontainers.image.title"] == "edge"
    assert labels["org.opencontainers.image.revision"] == "test"
    assert {"80/tcp", "443/tcp", "8053/udp", "8082/tcp"} <= set(config["ExposedPorts"])


def test_no_compilers_and_no_pip(podman, image):
    script = (
        "for c in gcc cc c++ g++ clang make ld pip pip3; do command -v $c && exit 1; done; "
        "! python -c 'import pip' 2>/dev/null"
    )
    out = _run(
        [
            *podman,
            "run",
            "--rm",
            *LIMITS,
            "--network",
            "none",
            "--entrypoint",
            "sh",
            image,
            "-c",
            script,
        ],
        check=False,
    )
    assert out.returncode == 0, f"found in the image: {out.stdout.strip()}"


def _free_privileged_port(taken: set[int]) -> int:
    """A port below 1024 free on 127.0.0.1 now (this test runs as root, so it may look)."""
    for port in range(1000, 900, -1):
        if port in taken:
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        return port
    raise AssertionError("no free port in 901-1000 on 127.0.0.1")


def test_runs_as_the_daemonset_runs_it(podman, image, tmp_path):
    """The container in the host's network (hostNetwork), as UID 10001 with a read-only
    root filesystem and NET_BIND_SERVICE alone, with the ConfigMap's configuration and the
    DaemonSet's Downward API environment, against the in-memory API server
    (tests/kube/emulator.py) on 127.0.0.1 holding k8s/ingressclass.yaml, an Ingress, and
    the pod and node the DaemonSet would have. Only the addresses change: loopback, free
    ports, and a free port below 1024 for each TCP entry point that has one, so binding
    it shows the capability works."""
    from tests.kube import objects as o
    from tests.kube.configmap import configmap_static
    from tests.kube.emulator import Emulator

    token, node_ip, pod_name = "edge-image-test", "172.18.0.3", "edge-abcde"
    (ic,) = [d for d in yaml.safe_load_all((ROOT / "k8s/ingressclass.yaml").read_text()) if d]
    static = configmap_static()  # no accept grace: the container's stop need not wait 10 s
    ports: dict[str, int] = {}
    for name, ep in static["entryPoints"].items():
        if ep["address"].endswith("/udp"):
            ep["address"] = "127.0.0.1:0/udp"
            continue
        port = int(ep["address"].rsplit(":", 1)[1])
        ports[name] = _free_privileged_port(set(ports.values())) if port < 1024 else _free_port()
        ep["address"] = f"127.0.0.1:{ports[name]}"
    ping = ports[static["ping"]["entryPoint"]]
    privileged = [p for p in ports.values() if p < 1024]
    assert privileged, "the ConfigMap has no entry point below 1024"

    name = f"edge-test-{os.getpid()}"
    with Emulator(token=token) as emu:
        for provider in static["providers"].values():  # kubernetesIngress, kubernetesCRD
            provider.update(endpoint=emu.url, token=token)
        etc = tmp_path / "etc-edge"
        etc.mkdir()
        (etc / "edge.yaml").write_text(yaml.safe_dump(static))
        etc.chmod(0o755)
        emu.create(ic)
        emu.create(o.service("whoami"))
        emu.create(o.endpoint_slice("whoami-1"))
        emu.create(o.ingress("web", host="web.example", ingress_class=ic["metadata"]["name"]))
        emu.create(
            {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {"name": "edge-worker"},
                "status": {"addresses": [{"type": "InternalIP", "address": node_ip}]},
            }
        )
        emu.create(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": pod_name,
                    "namespace": "edge-system",
                    "ownerReferences": [
                        {
                            "apiVersion": "apps/v1",
                            "kind": "DaemonSet",
                            "name": "edge",
                            "uid": "0b7c2b66-0000-4000-8000-000000000001",
                            "controller": True,
                        }
                    ],
                },
                "spec": {
                    "hostNetwork": True,
                    "nodeName": "edge-worker",
                    "containers": [{"name": "edge", "image": image}],
                },
                "status": {"phase": "Running"},
            }
        )
        _run(
            [
                *podman,
                "run",
                "--detach",
                "--name",
                name,
                *LIMITS,
                *AS_THE_DAEMONSET,
                "--network",
                "host",
                "--volume",
                f"{etc}:/etc/edge:ro",
                "--env",
                f"POD_NAME={pod_name}",
                "--env",
                "POD_NAMESPACE=edge-system",
                "--env",
                "NODE_NAME=edge-worker",
                "--env",
                "EDGE_CPU_LIMIT=1",
                "--env",
                f"EDGE_PING_URL=http://127.0.0.1:{ping}/ping",
                image,
            ]
        )
        try:
            deadline = time.monotonic() + 60
            ready = status = None
            while time.monotonic() < deadline:
                try:
                    status = _get(f"http://127.0.0.1:{ping}/ping")[0]
                    ready = _get(f"http://127.0.0.1:{ping}/ready")[0]
                    if status == ready == 200:
                        break
                except OSError:
                    pass
                time.sleep(0.5)
            logs = _run([*podman, "logs", name], check=False)
            detail = f"\n{logs.stdout[-3000:]}{logs.stderr[-3000:]}"
            assert status == 200, f"/ping: {status}{detail}"
            # ready: the provider listed the API server with the ConfigMap's settings
            assert ready == 200, f"/ready: {ready}{detail}"
            # bound below 1024 by UID 10001 (NET_BIND_SERVICE through the file capability)
            for port in privileged:
                assert _get(f"http://127.0.0.1:{port}/")[0] == 404, port
            # the Ingress status names the node, as in a hostNetwork DaemonSet
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline:
                ing = emu.get("Ingress", "default", "web") or {}
                if ing.get("status", {}).get("loadBalancer", {}).get("ingress"):
                    break
                time.sleep(0.2)
            assert ing["status"]["loadBalancer"]["ingress"] == [{"ip": node_ip}], detail
            (state,) = json.loads(_run([*podman, "inspect", name]).stdout)
            assert state["Config"]["User"] == "10001:10001"
            # The image's HEALTHCHECK, run once by hand (podman schedules it through systemd).
            assert _run([*podman, "healthcheck", "run", name], check=False).returncode == 0
        finally:
            _run([*podman, "rm", "--force", "--time", "5", name], check=False)


def test_refuses_to_start_without_net_bind_service(podman, image):
    out = _run([*podman, "run", "--rm", *LIMITS, "--network", "none", "--user", "10001:10001",
                "--cap-drop", "ALL", image, "--version"], check=False)  # fmt: skip
    assert out.returncode != 0
    assert "operation not permitted" in (out.stdout + out.stderr).lower()


def _podman_security(pod: dict, container: dict) -> list[str]:
    """podman flags for a pod spec's container securityContext (the fields the examples set)."""
    ctx = {**pod.get("securityContext", {}), **container.get("securityContext", {})}
    flags = ["--user", f"{ctx['runAsUser']}:{ctx['runAsGroup']}"]
    if ctx.get("readOnlyRootFilesystem"):
        flags.append("--read-only")
    if ctx.get("allowPrivilegeEscalation") is False:
        flags += ["--security-opt", "no-new-privileges"]
    caps = ctx.get("capabilities", {})
    flags += [f for c in caps.get("drop", []) for f in ("--cap-drop", c)]
    flags += [f for c in caps.get("add", []) for f in ("--cap-add", c)]
    return flags


def test_runs_as_the_examples_run_whoami(podman, image):
    """k8s/examples/whoami.yaml runs `edge whoami` from this image with its own
    securityContext: each Deployment's container, started with those settings (user,
    read-only root, no-new-privileges, the capabilities it drops and adds) and its args
    (the port moved to a free one in the host's network), answers as the backend it names.
    The image's interpreter carries cap_net_bind_service+ep, so a container whose
    capabilities lack NET_BIND_SERVICE cannot start it at all."""
    docs = [d for d in yaml.safe_load_all((ROOT / "k8s/examples/whoami.yaml").read_text()) if d]
    deployments = [d for d in docs if d["kind"] == "Deployment"]
    assert deployments
    for deployment in deployments:
        pod = deployment["spec"]["template"]["spec"]
        (container,) = pod["containers"]
        name = f"edge-test-{deployment['metadata']['name']}-{os.getpid()}"
        # A free port is free only until another process binds it (the suite runs on
        # several pytest-xdist workers, each dialing and listening on the host's
        # network): a container that found its port taken is started again on another,
        # at most three times.
        for attempt in range(3):
            port = _free_port()
            args = [a.replace(":8080", f":{port}") for a in container["args"]]
            _run([*podman, "run", "--detach", "--name", name, *LIMITS,
                  *_podman_security(pod, container), "--network", "host", image, *args],
                 check=False)  # fmt: skip
            try:
                deadline = time.monotonic() + 30
                status, body = 0, b""
                while time.monotonic() < deadline:
                    try:
                        status, body = _get(f"http://127.0.0.1:{port}/")
                        break
                    except OSError:
                        time.sleep(0.3)
                logs = _run([*podman, "logs", name], check=False)
                out = f"{logs.stdout[-2000:]}{logs.stderr[-2000:]}"
                if status == 0 and "address already in use" in out and attempt < 2:
                    continue
                detail = f"{deployment['metadata']['name']}: {out}"
                assert status == 200, detail
                want = args[args.index("--name") + 1]
                assert json.loads(body)["name"] == want, detail
                break
            finally:
                _run([*podman, "rm", "--force", "--time", "5", name], check=False)


def _pyproject_version() -> str:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]


def _pins() -> dict[str, str]:
    pins = {}
    for line in (ROOT / "image-constraints.txt").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, sep, version = line.partition("==")
            assert sep and name and version, f"image-constraints.txt: {line!r} is not NAME==VERSION"
            pins[re.sub(r"[-_.]+", "-", name).lower()] = version
    return pins


def test_the_image_holds_the_pinned_versions(podman, image):
    """Every distribution in the image's environment is pinned in image-constraints.txt
    and installed at its pin: a build of one commit is the same packages every time, not
    whatever the package index holds that day (the dependencies were unpinned: kubernetes,
    uvloop, msgspec... at their newest on each build)."""
    script = (
        "import importlib.metadata as m; "
        "print('\\n'.join(sorted(f'{d.metadata[\"Name\"]}=={d.version}' for d in m.distributions())))"
    )
    out = _run([*podman, "run", "--rm", *LIMITS, "--network", "none", *AS_THE_DAEMONSET,
                "--entrypoint", "python", image, "-c", script])  # fmt: skip
    installed = {
        re.sub(r"[-_.]+", "-", name).lower(): version
        for name, _, version in (line.partition("==") for line in out.stdout.split())
    }
    pins = _pins()
    assert installed.pop("edge-router") == _pyproject_version()
    unpinned = {n: v for n, v in installed.items() if n not in pins}
    assert not unpinned, f"in the image, not in image-constraints.txt: {unpinned}"
    moved = {n: (v, pins[n]) for n, v in installed.items() if pins[n] != v}
    assert not moved, f"installed (version, pin): {moved}"
