"""The one request-body policy of every route that takes a body (issue 40 #5).

``POST /v1/plan``, ``POST /v1/compare`` and the JSON form of ``POST /v1/plan/serve`` read their
body through :func:`parse_body`: strict UTF-8, JSON with duplicate keys, NaN/Infinity and deep
nesting refused (``attnplan.safeio.parse_json``), before any model sees it (``/v1/plan`` used to keep
the last of two duplicate keys, ``/v1/plan/serve`` refused them). The bodies' models use strict
types (``StrictInt``: ``true``, ``"2"`` and ``2.5`` are not integers) and forbid unknown fields.

No error carries the client's input: a library error that quotes a value the client sent (``unknown
device 'X'``, ``got 'x'``, a serve line's word) is :func:`scrub`-bed of it before the 422 leaves, in
one place (the app's RequestValidationError handler, rest/app.py), for every route. The raw body is
kept in the ASGI scope under ``BODY_KEY`` for that purpose only.
"""

from __future__ import annotations

import json
from typing import Any, Iterable

from fastapi.exceptions import RequestValidationError

BODY_KEY = "attnplan.body"
SHOWN = "(the value sent)"
MAX_MESSAGE_CHARS = 600
BODY_MAX_DEPTH = 128


def body_error(message: str) -> RequestValidationError:
    return RequestValidationError([{"type": "json_invalid", "loc": ("body",), "msg": message}])


def parse_body(raw: bytes) -> Any:
    """The body's JSON under the one policy, or a 422 at ``body`` that quotes none of it."""
    from attnplan.errors import AttnplanError
    from attnplan.safeio import parse_json

    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise body_error(f"the body is not UTF-8 (byte {exc.start})") from None
    try:
        # Twice a file's nesting limit: a body holds a config.json a level or two down, and that is held
        # to the file's own limit where it is read (attnplan/request.py bounded_config), naming the field.
        return parse_json(text, what="body", name="body", max_depth=BODY_MAX_DEPTH)
    except AttnplanError as exc:
        msg = str(exc).removeprefix("body: body: ")
        if "duplicate key" in msg:  # the key is the client's: not repeated back
            msg = "not valid JSON: an object names the same key twice (duplicate keys are refused)"
        raise body_error(msg) from None


def _strings(data: Any, out: set[str], depth: int = 0) -> None:
    if depth > 80:
        return
    if isinstance(data, str):
        out.add(data)
        out.update(data.split())
    elif isinstance(data, dict):
        for k, v in data.items():
            out.add(str(k))
            _strings(v, out, depth + 1)
    elif isinstance(data, list):
        for v in data:
            _strings(v, out, depth + 1)


def client_strings(raw: bytes) -> set[str]:
    """Every string the client sent in a body (JSON leaves and keys, and each word of them: a serve
    line's flags and values), or the words of a text body."""
    try:
        text = raw.decode("utf-8", "replace")
    except Exception:  # noqa: BLE001 - bytes always decode with "replace"
        return set()
    out: set[str] = set()
    try:
        _strings(json.loads(text), out)
    except (ValueError, RecursionError):
        out.add(text)
        out.update(text.split())
    try:
        import shlex

        out.update(w for s in list(out) for w in shlex.split(s) if len(s) <= 8192)
    except ValueError:
        pass
    return {s for s in out if s}


def scrub(message: str, sent: Iterable[str]) -> str:
    """``message`` without any value of ``sent`` it quotes (as Python or JSON quotes it), and bounded."""
    for s in sorted(set(sent), key=len, reverse=True):
        for quoted in (repr(s), json.dumps(s), json.dumps(s, ensure_ascii=False)):
            if quoted in message:
                message = message.replace(quoted, SHOWN)
    if len(message) > MAX_MESSAGE_CHARS:
        message = message[:MAX_MESSAGE_CHARS] + "..."
    return message
