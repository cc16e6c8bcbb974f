"""The static ``workers`` key: a number >= 1 or "auto", errors naming the key."""

from __future__ import annotations

import os

import pytest

from edge.config.loader import decode_static, load_static
from edge.errors import ConfigError


def test_default_is_one_process():
    static = decode_static({})
    assert static.workers == 1 and static.worker_count == 1


@pytest.mark.parametrize("n", [1, 2, 16])
def test_number(n):
    static = decode_static({"workers": n})
    assert static.workers == n and static.worker_count == n


def test_auto_is_cpu_count():
    static = decode_static({"workers": "auto"})
    assert static.workers == "auto"
    assert static.worker_count == max(1, os.cpu_count() or 1)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (0, "expected int >= 1"),
        (-2, "expected int >= 1"),
        ("many", "invalid value 'many'"),
        ("4", "invalid value '4'"),
        (True, "got bool"),
        (1.5, "got float"),
        ([2], "got array"),
    ],
)
def test_wrong_values_name_the_key(value, message):
    with pytest.raises(ConfigError) as info:
        decode_static({"workers": value}, source="static.yaml")
    assert info.value.path == "$.workers"
    assert message in str(info.value)
    assert str(info.value).startswith("static.yaml: $.workers: ")


def test_from_a_file(tmp_path):
    path = tmp_path / "static.yaml"
    path.write_text("entryPoints:\n  web: {address: ':0'}\nworkers: auto\n")
    assert load_static(path).worker_count >= 1
    path.write_text("workers: 0\n")
    with pytest.raises(ConfigError, match=r"\$\.workers"):
        load_static(path)
