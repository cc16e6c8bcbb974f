"""TLS in validation (edge.config.runtime.tls): relative certificate, key, CA and users
file paths, read from the working directory as Traefik reads them, and said so."""

from __future__ import annotations

import os

import pytest

from edge.config.runtime import client_tls_context, relative_files
from edge.errors import ConfigError
from tests.unit.config.documents import conf

PEM = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"


def test_relative_files_lists_every_relative_path_and_nothing_else() -> None:
    c = conf(
        {
            "http": {
                "middlewares": {
                    "basic": {"basicAuth": {"usersFile": "users"}},
                    "digest": {"digestAuth": {"usersFile": "conf/digest"}},
                    "absolute": {"basicAuth": {"usersFile": "/etc/users"}},
                    "inline": {"basicAuth": {"users": ["u:{SHA}x"]}},
                    "other": {"addPrefix": {"prefix": "/p"}},
                },
                "serversTransports": {
                    "t": {
                        "rootCAs": ["ca.pem", "/etc/ca.pem", PEM],
                        "certificates": [{"certFile": "c.crt", "keyFile": "/k.key"}],
                    }
                },
            },
            "tcp": {"serversTransports": {"u": {"tls": {"rootCAs": ["sub/ca.pem"]}}}},
            "tls": {
                "certificates": [{"certFile": "a.crt", "keyFile": "a.key"}],
                "stores": {
                    "default": {"defaultCertificate": {"certFile": "/d.crt", "keyFile": "d.key"}}
                },
                "options": {"o": {"clientAuth": {"caFiles": ["clients.pem"]}}},
            },
        }
    )
    assert relative_files(c) == [
        ("tls.certificates[0].certFile", "a.crt"),
        ("tls.certificates[0].keyFile", "a.key"),
        ("tls.stores.default.defaultCertificate.keyFile", "d.key"),
        ("tls.options.o.clientAuth.caFiles[0]", "clients.pem"),
        ("http.middlewares.basic.basicAuth.usersFile", "users"),
        ("http.middlewares.digest.digestAuth.usersFile", "conf/digest"),
        ("http.serversTransports.t.rootCAs[0]", "ca.pem"),
        ("http.serversTransports.t.certificates[0].certFile", "c.crt"),
        ("tcp.serversTransports.u.tls.rootCAs[0]", "sub/ca.pem"),
    ]


def test_a_missing_relative_file_says_where_it_was_looked_for(tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError) as info:
        client_tls_context(root_cas=["ca.pem"], system_roots=False)
    where = os.path.join(tmp_path, "ca.pem")
    assert info.value.message == (
        f"rootCAs[0] ca.pem: no such file (a relative path, read from the working directory: {where})"
    )
