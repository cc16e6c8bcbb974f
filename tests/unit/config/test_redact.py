"""Secrets in the configuration (edge.config.redact): the Secret mark, and the walk that
masks every marked value wherever its Struct sits, leaving what edge serves untouched.

The last tests hold the marks to the models: every field of edge.config whose name
says it may hold a credential is marked, or allowed here with the reason it is not.
"""

from __future__ import annotations

import importlib
import inspect
import json
import pkgutil
import re

import msgspec
import msgspec.inspect as mi
import pytest

import edge.config
from edge.config.dynamic import Configuration
from edge.config.loader import decode_dynamic, decode_static
from edge.config.redact import (
    MASK,
    HeaderValue,
    Redactor,
    Secret,
    credential_header,
    field_marks,
    is_secret,
    redacted,
    secret_fields,
)
from edge.config.static import StaticConfig
from tests.fixtures.tls.pki import PKI

KEY = PKI("redact CA").issue("a.test")


class Leaf(msgspec.Struct, frozen=True, omit_defaults=True):
    name: str = ""
    password: Secret = ""


class Other(msgspec.Struct, frozen=True, tag=True):
    token: Secret
    note: str = ""


class Tagged(msgspec.Struct, frozen=True, tag=True):
    leaf: Leaf


class Root(msgspec.Struct, frozen=True, omit_defaults=True, rename="camel"):
    plain: str = ""
    one: Secret = ""
    maybe: Secret | None = None
    lines: list[Secret] = []
    headers: dict[str, Secret] = {}
    leaf: Leaf | None = None
    leaves: list[Leaf] = []
    by_name: dict[str, Leaf] = {}
    nested: dict[str, list[Leaf]] = {}
    either: Other | Tagged | None = None
    sent: dict[str, HeaderValue] = {}


def test_is_secret_reads_the_mark_where_a_field_can_carry_it():
    fields = {f.name: f.type for f in mi.type_info(Root).fields}  # type: ignore[attr-defined]
    assert {name for name, t in fields.items() if is_secret(t)} == {
        "one",
        "maybe",
        "lines",
        "headers",
        "sent",
    }
    # a Struct's own marked fields are its own, not its holder's
    assert secret_fields(Root) == {"one", "maybe", "lines", "headers", "sent"}
    assert secret_fields(Leaf) == {"password"}
    assert secret_fields(Other) == {"token"}


def test_every_marked_value_is_masked_in_lists_dicts_optionals_and_unions():
    root = Root(
        plain="shown",
        one="s-one",
        maybe="s-maybe",
        lines=["s-line1", "s-line2", ""],
        headers={"Authorization": "s-bearer", "X-Tenant": "s-tenant"},
        leaf=Leaf(name="a", password="s-leaf"),
        leaves=[Leaf(name="b", password="s-list"), Leaf(name="c")],
        by_name={"d": Leaf(password="s-dict")},
        nested={"e": [Leaf(password="s-nested")]},
        either=Tagged(leaf=Leaf(name="f", password="s-union")),
    )
    before = msgspec.json.encode(root)
    shown = redacted(root)
    assert "s-" not in json.dumps(shown)
    assert shown == {
        "plain": "shown",
        "one": MASK,
        "maybe": MASK,
        "lines": [MASK, MASK, ""],  # the length kept, an empty line stays empty
        "headers": {"Authorization": MASK, "X-Tenant": MASK},  # names stay
        "leaf": {"name": "a", "password": MASK},
        "leaves": [{"name": "b", "password": MASK}, {"name": "c"}],
        "byName": {"d": {"password": MASK}},
        "nested": {"e": [{"password": MASK}]},
        "either": {"type": "Tagged", "leaf": {"name": "f", "password": MASK}},
    }
    other = redacted(Root(either=Other(token="s-other", note="n")))
    assert other == {"either": {"type": "Other", "token": MASK, "note": "n"}}
    # the value read is untouched: what edge serves keeps the real secrets
    assert msgspec.json.encode(root) == before and root.leaf.password == "s-leaf"


def test_header_values_are_masked_where_the_name_says_credential():
    shown = redacted(
        Root(
            sent={
                "Authorization": "Bearer s-1",
                "proxy-authorization": "Basic s-2",
                "Cookie": "sid=s-3",
                "X-Api-Key": "s-4",
                "X-Auth-Token": "s-5",
                "X-Amz-Security-Token": "s-6",
                "X-Forwarded-Proto": "https",
                "X-Tenant": "blue",
                "X-Empty-Token": "",
            }
        )
    )
    assert "s-" not in json.dumps(shown)
    assert shown["sent"]["X-Forwarded-Proto"] == "https" and shown["sent"]["X-Tenant"] == "blue"
    assert shown["sent"]["Authorization"] == MASK and shown["sent"]["X-Empty-Token"] == ""
    assert field_marks(Root) == {
        "one": True,
        "maybe": True,
        "lines": True,
        "headers": True,
        "sent": "header",
    }
    assert not credential_header("Host") and credential_header("WWW-Authenticate")


def test_an_empty_or_absent_secret_shows_as_it_is():
    assert redacted(Root(one="", maybe=None)) == {}
    assert redacted(Root(maybe="")) == {"maybe": ""}
    assert redacted(Leaf(name="x")) == {"name": "x"}


def test_a_private_key_pasted_into_an_unmarked_field_is_masked_too():
    shown = redacted(Root(plain=KEY.key_pem, leaf=Leaf(name=KEY.cert_pem)))
    assert shown["plain"] == MASK
    assert shown["leaf"]["name"] == KEY.cert_pem  # a certificate is public


def test_the_password_of_a_url_is_masked_its_user_and_host_kept():
    shown = redacted(
        Root(plain="https://ann:s-pw@auth.test:8443/check?x=1", leaves=[Leaf(name="http://ann@h/")])
    )
    assert shown["plain"] == "https://ann:xxxx@auth.test:8443/check?x=1"
    assert shown["leaves"] == [{"name": "http://ann@h/"}]  # no password: as it is
    assert (
        redacted(Root(plain="Host(`a@b`) || Path(`//x`)"))["plain"] == "Host(`a@b`) || Path(`//x`)"
    )


def test_a_redactor_learns_a_class_once():
    redactor = Redactor()
    redactor.shown(Root(leaf=Leaf(password="p")))
    learnt = dict(redactor._fields)
    assert set(learnt) == {Root, Leaf}
    redactor.shown(Root(leaves=[Leaf(password="q")]))
    assert all(redactor._fields[cls] is learnt[cls] for cls in learnt)


def test_the_dynamic_configuration_shows_none_of_its_secrets():
    conf = decode_dynamic(
        {
            "http": {
                "middlewares": {
                    "basic": {"basicAuth": {"users": ["ann:$apr1$s-basic-hash"]}},
                    "upstream-auth": {
                        "headers": {
                            "customRequestHeaders": {"Authorization": "Basic s-upstream"},
                            "appendRequestHeaders": {"X-Api-Key": "s-append"},
                        }
                    },
                    "digest": {"digestAuth": {"users": ["bob:realm:s-digest-hash"]}},
                    "limit": {
                        "rateLimit": {
                            "average": 5,
                            "redis": {
                                "endpoints": ["127.0.0.1:6379"],
                                "username": "s-redis-user",
                                "password": "s-redis-password",
                                "tls": {"cert": KEY.cert_pem, "key": KEY.key_pem},
                            },
                        }
                    },
                    "auth": {
                        "forwardAuth": {
                            "address": "https://auth.test",
                            "tls": {"cert": "/etc/a.crt", "key": "/etc/s-forward.key"},
                        }
                    },
                },
                "serversTransports": {
                    "mtls": {"certificates": [{"certFile": "c.pem", "keyFile": "s-st.key"}]}
                },
                "services": {
                    "probed": {
                        "loadBalancer": {
                            "servers": [{"url": "http://127.0.0.1:1"}],
                            "healthCheck": {"path": "/", "headers": {"X-Auth-Token": "s-hc"}},
                        }
                    }
                },
            },
            "tcp": {
                "serversTransports": {
                    "t": {"tls": {"certificates": [{"certFile": "c", "keyFile": "s-tcp.key"}]}}
                }
            },
            "tls": {
                "certificates": [{"certFile": KEY.cert_pem, "keyFile": KEY.key_pem}],
                "stores": {
                    "default": {"defaultCertificate": {"certFile": "c", "keyFile": "s-store.key"}}
                },
            },
        }
    )
    text = json.dumps(redacted(conf))
    assert "s-" not in text and "PRIVATE KEY" not in text
    assert "BEGIN CERTIFICATE" in text  # certificates stay: they are public
    shown = redacted(conf)
    assert shown["http"]["middlewares"]["limit"]["rateLimit"]["redis"]["password"] == MASK
    assert shown["http"]["middlewares"]["basic"]["basicAuth"]["users"] == [MASK]
    assert isinstance(conf, Configuration)
    assert conf.http.middlewares["limit"].rate_limit.redis.password == "s-redis-password"


def test_the_static_configuration_shows_none_of_its_secrets():
    static = decode_static(
        {
            "entryPoints": {"web": {"address": ":80"}},
            "providers": {
                "kubernetesIngress": {"token": "s-ingress-token"},
                "kubernetesCRD": {"token": "s-crd-token"},
                "kubernetesGateway": {"token": "s-gateway-token"},
                "kubernetesIngressNGINX": {"token": "s-nginx-token"},
            },
            "tracing": {
                "otlp": {
                    "http": {
                        "endpoint": "https://collector.test/v1/traces",
                        "headers": {"Authorization": "Bearer s-otlp-token"},
                        "tls": {"cert": "/c.pem", "key": "/s-otlp.key"},
                    }
                }
            },
        }
    )
    assert isinstance(static, StaticConfig)
    text = json.dumps(redacted(static))
    assert "s-" not in text
    assert '"Authorization": "xxxx"' in text


# Fields whose name says they might hold a credential and that are shown, each with why.
NOT_SECRET = {
    ("_Auth", "users_file"): "a path; the lines it holds are read when built, never shown",
    ("BasicAuth", "users_file"): "as _Auth's",
    ("DigestAuth", "users_file"): "as _Auth's",
    ("ErrorPage", "nginx_headers"): "the request facts ingress-nginx's error pages get",
    ("ForwardAuth", "auth_response_headers"): "header names",
    ("ForwardAuth", "auth_response_headers_regex"): "a pattern of header names",
    ("ForwardAuth", "auth_request_headers"): "header names",
    ("Headers", "custom_response_headers"): "sent to every client anyway",
    ("Headers", "access_control_allow_headers"): "header names (CORS)",
    ("Headers", "access_control_expose_headers"): "header names (CORS)",
    ("Headers", "hosts_proxy_headers"): "header names",
    ("Headers", "ssl_proxy_headers"): "header names and the values that mean HTTPS",
    ("Headers", "public_key"): "a public key pin (HPKP): public by design",
    ("Middleware", "headers"): "a Headers Struct: its fields are judged there",
    ("AccessLogFields", "headers"): "a Struct of header names and keep/drop/redact modes",
    ("EntryPoint", "forwarded_headers"): "trusted addresses",
    ("KubernetesIngressNGINXConfig", "global_allowed_response_headers"): "header names",
    ("Tracing", "captured_request_headers"): "header names",
    ("Tracing", "captured_response_headers"): "header names",
}
CREDENTIAL_NAME = re.compile(r"password|token|secret|key|users|headers", re.IGNORECASE)


def config_structs() -> set[type[msgspec.Struct]]:
    """Every msgspec Struct defined in a module of edge.config."""
    found: set[type[msgspec.Struct]] = set()
    for module in pkgutil.walk_packages(edge.config.__path__, "edge.config."):
        for value in vars(importlib.import_module(module.name)).values():
            if (
                inspect.isclass(value)
                and issubclass(value, msgspec.Struct)
                and value.__module__.startswith("edge.config.")
            ):
                found.add(value)
    return found


def test_every_field_named_like_a_credential_is_marked_or_allowed_with_a_reason():
    structs = config_structs()
    assert len(structs) > 50  # the walk found the models
    unmarked = sorted(
        f"{cls.__module__}.{cls.__name__}.{field.name}"
        for cls in structs
        for field in msgspec.structs.fields(cls)
        if CREDENTIAL_NAME.search(field.name)
        and field.name not in secret_fields(cls)
        and (cls.__name__, field.name) not in NOT_SECRET
    )
    assert not unmarked, f"mark these Secret, or allow them in NOT_SECRET with why: {unmarked}"


@pytest.mark.parametrize(
    ("cls", "field"),
    [
        ("BasicAuth", "users"),
        ("DigestAuth", "users"),
        ("Redis", "username"),
        ("Redis", "password"),
        ("ForwardAuthTLS", "key"),
        ("ClientCertificate", "key_file"),
        ("CertAndStores", "key_file"),
        ("StoreCertificate", "key_file"),
        ("KubernetesIngressConfig", "token"),
        ("KubernetesCRDConfig", "token"),
        ("KubernetesGatewayConfig", "token"),
        ("KubernetesIngressNGINXConfig", "token"),
        ("OTLPClientTLS", "key"),
        ("OTLPHTTP", "headers"),
        ("Headers", "custom_request_headers"),
        ("Headers", "append_request_headers"),
        ("ServerHealthCheck", "headers"),
    ],
)
def test_traefiks_credentials_are_marked(cls, field):
    # Traefik's loggable:"false" fields that edge has, and the OTLP export's headers.
    [found] = [c for c in config_structs() if c.__name__ == cls]
    assert field in secret_fields(found)


def test_the_allowlist_names_fields_that_exist():
    fields = {(c.__name__, f.name) for c in config_structs() for f in msgspec.structs.fields(c)}
    assert set(NOT_SECRET) <= fields
