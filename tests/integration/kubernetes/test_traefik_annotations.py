"""Traefik's Ingress annotations through a real edge: emulator -> provider -> edge -> whoami.

A Traefik user's Ingresses carry ``traefik.ingress.kubernetes.io/*``; edge reads them as
its own, so the route is served where the annotation says, and a key edge does not know
is named in the log and leaves its Ingress out instead of being ignored.
"""

from __future__ import annotations

import logging

from tests.integration.kubernetes.test_provider import (
    LOG,
    InProcessEdge,
    backend_service,
    emu,
    fast,
    ingress,
    messages,
    served_by,
    static_config,
    stop_all,
    until,
)
from tests.kube import objects as o

__all__ = ["emu"]  # the fixture, shared with the provider's tests


def test_a_traefik_annotated_ingress_is_served_on_the_entrypoint_it_names(emu, whoami, caplog):
    caplog.set_level(logging.INFO, LOG)
    emu.create(o.ingress_class("edge"))
    backend_service(emu, "app", whoami)
    pinned = ingress("pinned", [("pinned.test", "/", "Prefix", "app")])
    pinned["metadata"]["annotations"] = {
        "traefik.ingress.kubernetes.io/router.entrypoints": "websecure"
    }
    typo = ingress("typo", [("typo.test", "/", "Prefix", "app")])
    typo["metadata"]["annotations"] = {"traefik.ingress.kubernetes.io/router.entrypoint": "web"}
    emu.create(pinned)
    emu.create(typo)
    emu.create(ingress("plain", [("plain.test", "/", "Prefix", "app")]))
    static = static_config(emu)
    static["entryPoints"]["websecure"] = {"address": "127.0.0.1:0"}
    edge = InProcessEdge(static, tweak=fast()).start()
    try:
        assert until(lambda: edge.ready() == 200, 10.0), "edge never became ready"
        web, websecure = edge.port("web"), edge.port("websecure")
        assert served_by(websecure, "pinned.test") == "w1"
        assert served_by(web, "pinned.test") == "404"
        # an Ingress without the annotation is on every entry point
        assert served_by(web, "plain.test") == "w1"
        assert served_by(websecure, "plain.test") == "w1"
        # the misspelt key is named, and its Ingress is not served anywhere
        assert served_by(web, "typo.test") == "404"
        assert served_by(websecure, "typo.test") == "404"
        (line,) = messages(caplog, "ingress default/typo")
        assert "unknown annotation traefik.ingress.kubernetes.io/router.entrypoint " in line
    finally:
        stop_all([edge])
