"""``--hosts h1:8000,h2:8000``: ask the node services (``attnplan serve``) concurrently.

One ``POST /v1/plan`` per node and config (no ``node`` in the body: the service answers for its
own node; a whole model is sent as its ``ModelRequest``, the config.json inline), through one ``httpx.AsyncClient``: bounded concurrency, a deadline per node (all its
requests included), retries with exponential backoff and jitter on connect errors and on
502/503/504, ``Authorization: Bearer $ATTNPLAN_TOKEN``. Each answer is validated against
``policy.PlanAnswer``. Nothing a node does aborts the run: refused connections, timeouts, a
node that hangs mid-response, 401, 5xx, malformed or schema-invalid JSON each become that
node's row with the reason: an answer counts only when ``answers.parse_answer`` accepts it
(bounded size and nesting, schema_version, the config sent, coherent facts), and a host string
that can never name a host (``999.999.999.999``, an invalid IDNA label) is bad input (exit 2)
before anything is sent.
"""

from __future__ import annotations

import asyncio
import json
import random
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Iterable, MutableMapping, Optional, Sequence
from urllib.parse import urlsplit

from attnplan.policy import InvalidInputError
from attnplan.safeio import read_bounded

from .answers import BadAnswer, parse_answer
from .transport import ACCEPT_ENCODING, BodyError, read_body
from .model import NamedConfig, Outcome

DEFAULT_PORT = 8000
MAX_HOSTS = 100_000
MAX_ANSWER_BYTES = 4 << 20
MAX_HOSTS_FILE_BYTES = 16 << 20
RETRY_STATUS = frozenset({502, 503, 504})


@dataclass(frozen=True)
class Host:
    name: str  # as the user wrote it, without a scheme: the row's name
    url: str  # base URL


@dataclass
class HttpOptions:
    concurrency: int = 64
    timeout: float = 10.0  # seconds per node, every request and retry included
    connect_timeout: float = 3.0
    retries: int = 2  # extra attempts after a connect error or 502/503/504
    backoff: float = 0.2  # first retry waits backoff * (0.5..1.5), then doubles
    token: Optional[str] = field(default=None, repr=False)
    max_answer_bytes: int = MAX_ANSWER_BYTES


# -- targets -------------------------------------------------------------------------------
def parse_host(raw: str) -> Host:
    text = raw.strip()
    if not text:
        raise InvalidInputError("hosts", "empty host")
    url = text if "://" in text else f"http://{text}"
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise InvalidInputError("hosts", f"{text!r}: {exc}") from None
    if parts.scheme not in ("http", "https"):
        raise InvalidInputError("hosts", f"{text!r}: scheme must be http or https")
    if not parts.hostname:
        raise InvalidInputError("hosts", f"{text!r}: no host name")
    if parts.query or parts.fragment or parts.username or parts.password:
        raise InvalidInputError("hosts", f"{text!r}: give host:port (no credentials, query or fragment)")
    host = parts.hostname
    netloc = f"[{host}]" if ":" in host else host
    port = port if port is not None else (443 if parts.scheme == "https" else DEFAULT_PORT)
    base = f"{parts.scheme}://{netloc}:{port}{parts.path.rstrip('/')}"
    name = text.split("://", 1)[-1].rstrip("/")
    if ":" not in name.replace(f"[{host}]", ""):
        name = f"{name}:{port}"
    _check_url(text, base)
    return Host(name=name, url=base)


def _check_url(text: str, base: str) -> None:
    """Refuse what httpx would refuse at request time (an IPv4 address out of range, an IDNA
    label it cannot encode, a control character): one bad-input line, not a traceback mid-run."""
    if any(ord(c) < 0x21 or ord(c) == 0x7F for c in text):
        raise InvalidInputError("hosts", f"{text!r}: control characters or spaces in a host")
    try:
        url = _httpx().URL(base + "/v1/plan")
        url.host.encode("ascii")
    except Exception as exc:  # noqa: BLE001 - httpx.InvalidURL, idna.IDNAError (a UnicodeError), ...
        why = str(exc).splitlines()[0][:120] if str(exc) else type(exc).__name__
        raise InvalidInputError("hosts", f"{text!r} is not a host name or address: {why}") from None


def parse_hosts(items: Iterable[str]) -> list[Host]:
    """Comma- or newline-separated; ``#`` starts a comment; duplicates are one node."""
    out: dict[str, Host] = {}
    for item in items:
        for line in item.splitlines():
            line = line.split("#", 1)[0]
            for raw in line.split(","):
                if raw.strip():
                    h = parse_host(raw)
                    out.setdefault(h.url, h)
                    if len(out) > MAX_HOSTS:
                        raise InvalidInputError("hosts", f"more than {MAX_HOSTS} hosts")
    if not out:
        raise InvalidInputError("hosts", "no hosts given")
    return list(out.values())


def read_hosts_file(path: str) -> list[Host]:
    # Bounded, regular files only: a FIFO or /dev/zero is bad input, not a hang.
    text = read_bounded(path, what="hosts_file", max_bytes=MAX_HOSTS_FILE_BYTES)
    try:
        return parse_hosts([text])
    except InvalidInputError as exc:
        raise InvalidInputError("hosts_file", f"{path}: {str(exc).split(': ', 1)[-1]}") from None


# -- one node ------------------------------------------------------------------------------
class NodeFailure(Exception):
    def __init__(self, kind: str, reason: str):
        self.kind = kind
        self.reason = reason
        super().__init__(reason)


def _detail(body: bytes) -> str:
    from attnplan.policy import AttnplanError
    from attnplan.safeio import parse_json

    try:
        data = parse_json(body[:65536].decode("utf-8", "replace"), what="answer", name="answer", max_depth=16)
    except AttnplanError:
        text = body[:120].decode("utf-8", "replace").strip()
        return text or "empty body"
    if isinstance(data, dict) and "detail" in data:
        d = data["detail"]
        if isinstance(d, list):
            return "; ".join(f"{e.get('field') or '.'.join(map(str, e.get('loc', [])))}: {e.get('msg')}"
                             for e in d[:3] if isinstance(e, dict)) or "invalid request"
        return str(d)[:200]
    return json.dumps(data, default=str)[:120]


def _connect_reason(exc: Exception) -> str:
    # httpx says "All connection attempts failed"; the OSError underneath says why.
    cause: BaseException | None = exc
    for _ in range(6):
        if cause is None:
            break
        if isinstance(cause, ConnectionRefusedError):
            return "connection refused"
        if isinstance(cause, OSError) and cause.strerror:
            exc = cause  # type: ignore[assignment]
            break
        cause = cause.__cause__ or cause.__context__
    text = (exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)) or type(exc).__name__
    low = text.lower()
    if "refused" in low:
        return "connection refused"
    if isinstance(exc, _httpx().ConnectTimeout) or "timed out" in low:
        return "connect timed out"
    if "name or service not known" in low or "nodename nor servname" in low or "name resolution" in low:
        return "host name does not resolve"
    return f"connect failed: {text[:160]}"


def _httpx():  # imported lazily: `attnplan plan` never pays for httpx
    import httpx

    return httpx


def _cache_missing_sniffio() -> None:
    """httpcore runs ``import sniffio`` on every request; where sniffio is not installed (httpx
    0.28 no longer needs it) each failed import rescans sys.path: ~8 per node, 1-3 s per 1,000
    nodes. Recording the absence makes the same ImportError immediate; nothing else changes."""
    import importlib.util

    if "sniffio" not in sys.modules and importlib.util.find_spec("sniffio") is None:
        sys.modules["sniffio"] = None  # type: ignore[assignment]


def validate_answer(body: bytes, nc: NamedConfig) -> Any:
    """The node's answer (a ``PlanAnswer``, or a ``ModelAnswer`` for a model), or ``NodeFailure``
    ("error") saying why it does not count."""
    try:
        if nc.request is not None:
            from .model_answers import parse_model_answer

            return parse_model_answer(body, nc)
        return parse_answer(body, nc)
    except BadAnswer as exc:
        raise NodeFailure("error", str(exc)) from None


async def _post_plan(client: Any, host: Host, nc: NamedConfig, opts: HttpOptions, state: dict[str, str]) -> Any:
    httpx = _httpx()
    url = f"{host.url}/v1/plan"
    payload: dict[str, Any]
    if nc.request is not None:  # a whole model: the ModelRequest itself (rest/models.py PlanRequest)
        payload = nc.request.wire()
    else:
        assert nc.config is not None
        payload = {"config": nc.config.model_dump(mode="json", exclude_none=True)}
    # Sent only when asked for: a node older than the field rejects any unknown key (422,
    # rest/models.py PlanRequest has extra="forbid"), so a default preflight still works with it.
    if nc.engine is not None:
        payload["engine"] = str(nc.engine)
    attempt = 0
    while True:
        state["stage"] = "no response headers"
        try:
            async with client.stream("POST", url, json=payload, params={"trace": "false"}) as resp:
                state["stage"] = f"HTTP {resp.status_code} headers received, body incomplete"
                try:  # bounded after decoding, inflated off the event loop (transport.py)
                    body = await read_body(resp, opts.max_answer_bytes, state)
                except BodyError as exc:
                    raise NodeFailure("error", str(exc)) from None
                status = resp.status_code
        except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
            if attempt < opts.retries:
                await asyncio.sleep(opts.backoff * (2 ** attempt) * (0.5 + random.random()))
                attempt += 1
                continue
            tries = f" ({attempt + 1} attempts)" if attempt else ""
            raise NodeFailure("unreachable", _connect_reason(exc) + tries) from None
        except httpx.ReadTimeout:
            raise NodeFailure("unreachable", f"timed out reading the answer ({state['stage']})") from None
        except httpx.RemoteProtocolError as exc:
            raise NodeFailure("unreachable", f"connection closed mid-response ({str(exc)[:100] or state['stage']})") from None
        except httpx.TransportError as exc:
            raise NodeFailure("unreachable", f"{type(exc).__name__}: {str(exc)[:120] or state['stage']}") from None
        state["stage"] = f"HTTP {status} answered"
        if status == 200:
            return validate_answer(body, nc)
        if status in RETRY_STATUS and attempt < opts.retries:
            await asyncio.sleep(opts.backoff * (2 ** attempt) * (0.5 + random.random()))
            attempt += 1
            continue
        detail = _detail(body)
        if status in (401, 403):
            hint = "ATTNPLAN_TOKEN is set but was refused" if opts.token else "set ATTNPLAN_TOKEN"
            raise NodeFailure("error", f"HTTP {status}: {detail} ({hint})")
        if status == 422:
            raise NodeFailure("error", f"HTTP 422: the node refused the request: {detail}")
        raise NodeFailure("error", f"HTTP {status}: {detail}")


async def query_node(host: Host, configs: Sequence[NamedConfig], opts: HttpOptions, sem: asyncio.Semaphore,
                     make_client: Any) -> Outcome:
    async with sem:
        t0 = time.perf_counter()
        state = {"stage": "no response headers"}

        async def ask() -> list[Any]:
            async with make_client() as client:
                return [await _post_plan(client, host, nc, opts, state) for nc in configs]

        try:
            answers = await asyncio.wait_for(ask(), opts.timeout)
        except asyncio.CancelledError:
            raise
        except NodeFailure as f:
            return Outcome(name=host.name, address=host.url, kind=f.kind, reason=f.reason,  # type: ignore[arg-type]
                           elapsed_ms=(time.perf_counter() - t0) * 1000)
        except asyncio.TimeoutError:
            stage = state["stage"]
            if "body incomplete" in stage:
                why = f"hung mid-response: answer incomplete after {opts.timeout:g}s ({stage.replace(', body incomplete', '')})"
            else:
                why = f"no answer within {opts.timeout:g}s ({stage})"
            return Outcome(name=host.name, address=host.url, kind="unreachable", reason=why,
                           elapsed_ms=(time.perf_counter() - t0) * 1000)
        except Exception as exc:  # noqa: BLE001 - nothing one node does may abort the run: it is its row
            why = str(exc).splitlines()[0][:160] if str(exc) else ""
            return Outcome(name=host.name, address=host.url, kind="error",
                           reason=f"{type(exc).__name__}: {why}".rstrip(": "),
                           elapsed_ms=(time.perf_counter() - t0) * 1000)
        return Outcome(name=host.name, address=host.url, answers=answers, elapsed_ms=(time.perf_counter() - t0) * 1000)


async def query_hosts(hosts: Sequence[Host], configs: Sequence[NamedConfig], opts: HttpOptions,
                      sink: MutableMapping[int, Outcome]) -> None:
    """Fill ``sink[i]`` with host i's outcome as each node finishes (so an interrupted run
    still has every finished node)."""
    httpx = _httpx()
    _cache_missing_sniffio()
    headers = {"Accept": "application/json", "User-Agent": "attnplan-preflight", "Accept-Encoding": ACCEPT_ENCODING}
    if opts.token:
        headers["Authorization"] = f"Bearer {opts.token}"
    timeout = httpx.Timeout(opts.timeout, connect=min(opts.connect_timeout, opts.timeout))
    sem = asyncio.Semaphore(opts.concurrency)
    # One small client per node (its one keep-alive connection serves all its configs), sharing
    # one TLS context: a single pool of thousands of hosts costs httpcore O(connections^2) a
    # request. trust_env=False: no proxy variables; traffic goes to the listed hosts only.
    ssl_context = httpx.create_ssl_context()  # ~30 ms: once, not once per node
    limits = httpx.Limits(max_connections=1, max_keepalive_connections=1)

    def make_client() -> Any:
        return httpx.AsyncClient(transport=httpx.AsyncHTTPTransport(verify=ssl_context, limits=limits), headers=headers,
                                 timeout=timeout, trust_env=False, follow_redirects=False)

    async def one(i: int, h: Host) -> None:
        sink[i] = await query_node(h, configs, opts, sem, make_client)

    await asyncio.gather(*(one(i, h) for i, h in enumerate(hosts)))
