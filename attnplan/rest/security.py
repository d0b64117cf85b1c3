"""Who may call the service and how much they may send: bearer token and body limit (ASGI).

Both run before routing, so an unauthenticated or oversized request never reaches a handler
(nor a JSON parser). The token is compared in constant time and never logged or echoed; both
the server's token and the client's are stripped of surrounding whitespace (a Kubernetes secret
often ends in a newline). A token in the URL (``?token=``) is refused outright: URLs end up in
access logs, proxies and browser history.
"""

from __future__ import annotations

import hmac
import ipaddress
import json
from typing import Iterable, Mapping, Optional

from urllib.parse import parse_qsl

from starlette.types import ASGIApp, Receive, Scope, Send

from attnplan.policy import InvalidInputError

MAX_BODY_BYTES = 64 * 1024
# Answers after which the connection is closed: the client sent something we refuse (bad framing,
# no token, too large, not JSON, invalid) and may still be sending it; keeping the connection
# would let an unauthenticated client hold it (issue 24 #1).
CLOSE_STATUSES = frozenset({400, 401, 403, 405, 408, 411, 413, 415, 422, 431})
MIN_TOKEN_CHARS = 16  # for a non-loopback bind; `openssl rand -hex 32` gives 64
URL_TOKEN_PARAMS = frozenset({"token", "access_token", "bearer", "api_key", "apikey"})

# Open without a token: the Docker HEALTHCHECK and orchestrators' probes, and the status page's
# static shell and the API schema, which hold no node data (the page asks for the token and
# sends it with every data call). Everything else needs the token when one is set.
OPEN_PATHS = frozenset({"/healthz", "/readyz", "/", "/docs", "/docs/oauth2-redirect", "/openapi.json"})
OPEN_PREFIXES = ("/static/", "/docs/assets/")


def is_loopback(host: str) -> bool:
    """127.0.0.0/8, ::1 and 'localhost'; any other name or address may be reachable from outside."""
    h = host.strip().strip("[]").lower()
    if h == "localhost":
        return True
    try:
        return ipaddress.ip_address(h).is_loopback
    except ValueError:
        return False


def resolve_token(flag: Optional[str], env: Mapping[str, str]) -> Optional[str]:
    """--token wins over ATTNPLAN_TOKEN; an empty value means no token; surrounding whitespace
    is stripped (as from the client's); a value that is only whitespace is refused (whoever set
    it meant to require a token, and no client could ever send it)."""
    raw = flag if flag else env.get("ATTNPLAN_TOKEN", "")
    token = raw.strip()
    if raw and not token:
        where = "--token" if flag else "ATTNPLAN_TOKEN"
        raise InvalidInputError("token", f"{where} is blank (only whitespace): unset it or give a real token")
    return token or None


def check_token(token: Optional[str], host: str) -> None:
    """A token guarding a non-loopback bind must be long enough not to be guessed."""
    if token is not None and not is_loopback(host) and len(token) < MIN_TOKEN_CHARS:
        raise InvalidInputError("token", f"the token is {len(token)} characters; a non-loopback bind needs at least "
                                         f"{MIN_TOKEN_CHARS} (e.g. `openssl rand -hex 32`)")


def token_in_url(query_string: bytes) -> bool:
    if not query_string:
        return False
    try:
        names = {k.lower() for k, _ in parse_qsl(query_string.decode("latin-1"), keep_blank_values=True)}
    except ValueError:
        return False
    return bool(names & URL_TOKEN_PARAMS)


async def send_json(send: Send, status: int, detail: str, headers: Iterable[tuple[bytes, bytes]] = ()) -> None:
    body = json.dumps({"detail": detail}, separators=(",", ":")).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                            *headers]})
    await send({"type": "http.response.body", "body": body})


class NoTokenInURL:
    """400 for any request carrying a token in its query string, whether or not it is right."""

    def __init__(self, app: ASGIApp):
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and token_in_url(scope.get("query_string", b"")):
            await send_json(send, 400, "never put a token in the URL: send 'Authorization: Bearer TOKEN'")
            return
        await self.app(scope, receive, send)


class BearerAuth:
    def __init__(self, app: ASGIApp, token: str):
        self.app = app
        self._expected = token.strip().encode("utf-8")

    def _allowed(self, scope: Scope) -> bool:
        header = b""
        for name, value in scope["headers"]:
            if name == b"authorization":
                header = value
                break
        scheme, _, given = header.partition(b" ")
        if scheme.lower() != b"bearer":
            given = b""
        # compare_digest's time depends on the expected token's length only, never on where
        # the given one differs.
        return hmac.compare_digest(given.strip(), self._expected)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path = scope["path"]
        if path in OPEN_PATHS or path.startswith(OPEN_PREFIXES) or self._allowed(scope):
            await self.app(scope, receive, send)
            return
        await send_json(send, 401, "missing or invalid bearer token", [(b"www-authenticate", b'Bearer realm="attnplan"')])


class BodyLimit:
    """413 past ``limit`` bytes: from Content-Length up front, else by counting a streamed body."""

    def __init__(self, app: ASGIApp, limit: int = MAX_BODY_BYTES):
        self.app = app
        self.limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared: Optional[bytes] = None
        for name, value in scope["headers"]:
            if name == b"content-length":
                declared = value
                break
        if declared is not None:
            # The server already enforces Content-Length framing, so the declared size is the size.
            if not declared.isdigit():
                await send_json(send, 400, "invalid Content-Length")
                return
            if int(declared) > self.limit:
                await send_json(send, 413, f"request body over {self.limit} bytes", [(b"connection", b"close")])
                return
            await self.app(scope, receive, send)
            return
        # No Content-Length (chunked): read at most limit bytes, then hand the body on whole.
        chunks: list[bytes] = []
        total = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                return  # the client went away
            chunk = message.get("body", b"")
            total += len(chunk)
            if total > self.limit:
                await send_json(send, 413, f"request body over {self.limit} bytes", [(b"connection", b"close")])
                return
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        replayed = False

        async def replay() -> dict:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": b"".join(chunks), "more_body": False}
            return await receive()

        await self.app(scope, replay, send)


class CloseOnError:
    """``connection: close`` on every answer in ``CLOSE_STATUSES`` (uvicorn then closes the
    connection once the answer is sent, whether or not the request body was read)."""

    def __init__(self, app: ASGIApp):
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def closing(message: dict) -> None:
            if message["type"] == "http.response.start" and message["status"] in CLOSE_STATUSES:
                headers = list(message.get("headers", []))
                if not any(k.lower() == b"connection" for k, _ in headers):
                    message = {**message, "headers": [*headers, (b"connection", b"close")]}
            await send(message)

        await self.app(scope, receive, closing)


class CatchAll:
    """The last word on an exception no handler took: a 500 ``{"detail": "internal server error"}``
    (the traceback to the server's log only), and the exception goes no further.

    Starlette's ServerErrorMiddleware answers 500 through the app's ``Exception`` handler and then
    re-raises, and uvicorn closes a connection whose app raised after its response had started
    (protocols/http/h11_impl.py run_asgi: ``self.transport.close()``), without a ``connection:
    close`` header: a keep-alive client's next request on that connection got nothing (issue 40 #5).
    Caught here, inside the app, the connection stays usable."""

    def __init__(self, app: ASGIApp):
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def tracking(message: dict) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, receive, tracking)
        except Exception as exc:  # noqa: BLE001 - answered as 500; the log has the traceback
            import logging

            logging.getLogger("attnplan.api").error("unhandled %s on %s %s", type(exc).__name__, scope.get("method"),
                                                    scope.get("path"), exc_info=exc)
            if not started:
                await send_json(send, 500, "internal server error")
            # else: the response is already on its way (or sent); nothing more can be said on it
