"""Files a dynamic configuration names by path: certificates, keys, CAs, users files.

Owns the one rule for where such a path is read and the one text that says so.
Traefik (Go's ``os.ReadFile``) opens a relative path from the process's working
directory, and so does edge; whoever reports on such a file (an error, ``edge
check``) adds :func:`relative_note`, so that a user running edge from another
folder sees which file was looked for. Inline PEM (a value holding ``-----BEGIN``)
is no path. Imports only :mod:`edge.config.pem`, so the configuration models'
helpers (:mod:`edge.config.htpasswd`) and validation can both use it.
"""

from __future__ import annotations

import os

from edge.config.pem import PEM_MARK

__all__ = ["relative", "relative_note"]


def relative(value: str) -> bool:
    """Whether ``value`` is a relative path: not empty, not inline PEM, not absolute."""
    return bool(value) and PEM_MARK not in value and not os.path.isabs(value)


def relative_note(value: str) -> str:
    """What a message about file ``value`` adds when the path is relative: where it was
    looked for (the working directory); ``""`` for an absolute path or inline PEM."""
    if not relative(value):
        return ""
    return f" (a relative path, read from the working directory: {os.path.abspath(value)})"
