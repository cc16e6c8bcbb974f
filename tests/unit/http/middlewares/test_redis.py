"""The pure parts of edge's Redis client (edge.http.middlewares.redis): a script's
SHA1 as Redis computes it, and a prepared call's bytes against the command they
stand for. The client's I/O runs against a real redis-server in
tests/integration/http/test_redis_limit.py."""

from __future__ import annotations

import hashlib

from edge.http.middlewares.limits import TOKEN_BUCKET
from edge.http.middlewares.redis import Script, ScriptCall
from edge.http.middlewares.resp import bulk, command


def test_script_sha_is_redis_sha1_of_its_text():
    s = Script("return 1")
    assert s.sha == b"e0e1f9fabfc9d4800c877a703b823ac0578ff8db"
    assert TOKEN_BUCKET.sha == hashlib.sha1(TOKEN_BUCKET.source).hexdigest().encode()


def test_script_call_is_the_command_it_stands_for():
    args = ("1e-05", 10, 2000, "50000.0")
    call = ScriptCall(TOKEN_BUCKET, args)
    key = b"edge:rate:m@file:10.0.0.1"
    assert call.sha_head + bulk(key) + call.tail == command(
        "EVALSHA", TOKEN_BUCKET.sha, 1, key, *args
    )
    assert call.eval_head + bulk(key) + call.tail == command(
        "EVAL", TOKEN_BUCKET.source, 1, key, *args
    )
