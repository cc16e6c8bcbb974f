"""Paths a dynamic configuration names (edge.config.paths): which are relative, and the
one note that says where such a file is read from."""

from __future__ import annotations

import os

from edge.config.paths import relative, relative_note

PEM = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"


def test_relative_is_a_path_neither_absolute_nor_inline_pem() -> None:
    assert relative("a.crt") and relative("sub/users") and relative("../x")
    assert not relative("/etc/a.crt")
    assert not relative(PEM)
    assert not relative("")


def test_relative_note_names_the_file_in_the_working_directory(tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    where = os.path.join(tmp_path, "sub", "users")
    assert relative_note("sub/users") == (
        f" (a relative path, read from the working directory: {where})"
    )
    assert relative_note("/abs.pem") == relative_note(PEM) == relative_note("") == ""
