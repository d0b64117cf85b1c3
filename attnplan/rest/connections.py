"""Connections are closed when a client is slow, and there are at most so many.

uvicorn's ``timeout_keep_alive`` runs only *after* a response: a client that connects and then
sends nothing, or drips a header a byte at a time, is never timed out (uvicorn 0.54,
``protocols/http/h11_impl.py``: ``data_received`` even cancels the keep-alive timer on every
byte). ``limit_concurrency`` answers 503 to *requests*, so idle sockets that never send one keep
their descriptors until the process hits its limit and ``accept()`` fails with EMFILE (every
other client, health probes included, is then refused). The bearer token cannot help: auth runs
after the headers, and a request whose body is still coming is not done (issue 24 #1: 1,100
clients sending ``Content-Length: 60000`` then a byte every 2 s held 1,000 connections and
starved ``/healthz`` for 30 s).

``guarded_protocol`` is uvicorn's HTTP protocol (httptools' where installed, else h11's; the
guard reads only uvicorn's request cycle, common to both) with these additions:

- a **header deadline**: a connection waiting for request headers (just accepted, or idle
  between keep-alive requests) is closed ``header_timeout`` seconds after it started waiting,
  however many bytes it dripped meanwhile;
- a **body deadline**: a request whose body is not complete ``body_timeout`` seconds after its
  headers is answered 408 and its connection closed;
- a **request deadline**: a request not answered ``request_timeout`` seconds after its headers
  (body, computation and response together) is answered 503, or its connection closed when the
  response had begun;
- a **connection cap**: at ``max_connections`` open connections, a new one evicts the oldest
  connection that is waiting on its client (for headers first, then for a body); a request
  whose body is complete and is being served is never dropped; if every connection is busy,
  the new one is closed at once. A client that sends its request promptly (``/healthz``)
  therefore always gets in, whatever number of silent or dripping sockets is held against the
  server.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections import OrderedDict
from typing import Any, Optional

from uvicorn.protocols.http.h11_impl import H11Protocol

from attnplan.errors import InvalidInputError

log = logging.getLogger("attnplan.api")

HEADER_TIMEOUT_S = 5.0
BODY_TIMEOUT_S = 10.0     # a 64 KiB body at any real link speed takes well under a second
REQUEST_TIMEOUT_S = 30.0  # headers to response; a plan takes milliseconds, a cold rejection ~0.3 s
MAX_CONNECTIONS = 1000
NOFILE_HEADROOM = 64  # descriptors kept for the listening socket, logs, probes and the artifactory check


class Guard:
    """State shared by one server's connections."""

    def __init__(self, max_connections: int, header_timeout: float, body_timeout: float = BODY_TIMEOUT_S,
                 request_timeout: float = REQUEST_TIMEOUT_S):
        if max_connections < 1:
            raise InvalidInputError("max_connections", f"{max_connections} accepts no connection: give 1 or more")
        self.max_connections = max_connections
        self.header_timeout = header_timeout
        self.body_timeout = body_timeout
        self.request_timeout = request_timeout
        self.open: set[Any] = set()  # live connections (evicted ones leave at once)
        # connection -> when it started waiting on its client, oldest first
        self.waiting: "OrderedDict[Any, float]" = OrderedDict()  # for request headers
        self.receiving: "OrderedDict[Any, float]" = OrderedDict()  # headers done, for the body
        self.evicted = 0
        self.refused = 0
        self.timed_out = 0       # header deadline
        self.body_timed_out = 0  # body deadline (408)
        self.request_timed_out = 0  # request deadline (503 or closed)


def nofile_cap(wanted: int) -> int:
    """``wanted``, lowered to what this process's descriptor limit can hold (after raising the
    soft limit as far as the hard one allows)."""
    try:
        import resource

        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        target = hard if hard != resource.RLIM_INFINITY else max(soft, 65536)
        if soft != resource.RLIM_INFINITY and soft < target:
            try:
                resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
                soft = target
            except (ValueError, OSError):
                pass
        if soft == resource.RLIM_INFINITY:
            return wanted
        return max(1, min(wanted, soft - NOFILE_HEADROOM))
    except ImportError:  # pragma: no cover - not POSIX
        return wanted


def _raw_response(status: int, reason: str, detail: str) -> bytes:
    body = json.dumps({"detail": detail}, separators=(",", ":")).encode()
    return (f"HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\ncontent-length: {len(body)}\r\n"
            f"connection: close\r\n\r\n").encode() + body


def http_protocol_base(wanted: str = "auto") -> type:
    """uvicorn's httptools protocol (``auto`` when httptools is installed, or ``httptools``),
    else its h11 one. ``ATTNPLAN_HTTP`` chooses for ``serve``."""
    if wanted in ("auto", "httptools"):
        try:
            from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

            return HttpToolsProtocol
        except ImportError:
            if wanted == "httptools":
                from attnplan.policy import InvalidInputError

                raise InvalidInputError("ATTNPLAN_HTTP", "httptools is not installed (pip install httptools), "
                                                         "or use auto or h11") from None
    return H11Protocol


def guarded_protocol(max_connections: int = MAX_CONNECTIONS, header_timeout: float = HEADER_TIMEOUT_S,
                     body_timeout: float = BODY_TIMEOUT_S, request_timeout: float = REQUEST_TIMEOUT_S,
                     http: str = "auto") -> type:
    """A uvicorn ``http`` protocol class (``uvicorn.Config(http=...)``) with its own ``Guard``."""
    guard = Guard(max_connections, header_timeout, body_timeout, request_timeout)
    base: Any = http_protocol_base(http)

    class GuardedProtocol(base):  # type: ignore[misc, valid-type]
        attnplan_guard = guard

        def __init__(self, *args: Any, **kwargs: Any):
            super().__init__(*args, **kwargs)
            self._header_timer: Optional[asyncio.TimerHandle] = None
            self._body_timer: Optional[asyncio.TimerHandle] = None
            self._request_timer: Optional[asyncio.TimerHandle] = None
            self._timed_cycle: Any = None  # the request the request timer runs for
            self._refused = False

        # -- connection lifecycle ------------------------------------------------------
        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            if len(guard.open) >= guard.max_connections and not self._make_room():
                self._refused = True
                guard.refused += 1
                transport.abort()
                return
            guard.open.add(self)
            super().connection_made(transport)
            self._track()

        def connection_lost(self, exc: Optional[Exception]) -> None:
            if self._refused:
                return  # never registered with uvicorn: nothing to tear down
            self._forget()
            super().connection_lost(exc)

        def data_received(self, data: bytes) -> None:
            super().data_received(data)
            self._track()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            self._track()

        # -- the guard -----------------------------------------------------------------
        def _live(self) -> bool:
            return self.transport is not None and not self.transport.is_closing()

        def _waiting(self) -> bool:
            """No request in progress, and the next one's headers not complete."""
            if not self._live():
                return False
            return self.cycle is None or self.cycle.response_complete

        def _receiving(self) -> bool:
            """Headers complete, body not yet, nothing answered: the server waits on the client."""
            if not self._live() or self.cycle is None or self.cycle.response_started:
                return False
            return bool(self.cycle.more_body)

        def _track(self) -> None:
            if self._waiting():
                if self not in guard.waiting:
                    guard.waiting[self] = self.loop.time()
                if self._header_timer is None:
                    self._header_timer = self.loop.call_later(guard.header_timeout, self._deadline)
            else:
                guard.waiting.pop(self, None)
                self._header_timer = _cancel(self._header_timer)
            if self._receiving():
                if self not in guard.receiving:
                    guard.receiving[self] = self.loop.time()
                if self._body_timer is None:
                    self._body_timer = self.loop.call_later(guard.body_timeout, self._body_deadline)
            else:
                guard.receiving.pop(self, None)
                self._body_timer = _cancel(self._body_timer)
            cycle = self.cycle
            if cycle is not None and not cycle.response_complete and self._live():
                if self._timed_cycle is not cycle:
                    _cancel(self._request_timer)
                    self._timed_cycle = cycle
                    self._request_timer = self.loop.call_later(guard.request_timeout, self._request_deadline)
            else:
                self._timed_cycle = None
                self._request_timer = _cancel(self._request_timer)

        def _forget(self) -> None:
            guard.open.discard(self)
            guard.waiting.pop(self, None)
            guard.receiving.pop(self, None)
            self._header_timer = _cancel(self._header_timer)
            self._body_timer = _cancel(self._body_timer)
            self._request_timer = _cancel(self._request_timer)
            self._timed_cycle = None

        def _deadline(self) -> None:
            self._header_timer = None
            if self._waiting():
                guard.timed_out += 1
                self._drop()

        def _body_deadline(self) -> None:
            self._body_timer = None
            if self._receiving():
                guard.body_timed_out += 1
                self._answer_and_close(408, "Request Timeout",
                                       f"request body not complete within {guard.body_timeout:g} s of its headers")

        def _request_deadline(self) -> None:
            self._request_timer = None
            cycle = self.cycle
            if cycle is None or cycle is not self._timed_cycle or cycle.response_complete or not self._live():
                return
            guard.request_timed_out += 1
            if cycle.response_started:
                self._drop()
            else:
                self._answer_and_close(503, "Service Unavailable",
                                       f"request not answered within {guard.request_timeout:g} s")

        def _answer_and_close(self, status: int, reason: str, detail: str) -> None:
            """Answer for the app (which is then told the client is gone) and close."""
            cycle = self.cycle
            # Written raw (not through h11's state machine or httptools'): the connection is
            # closed right after, so no parser state needs to follow it.
            self.transport.write(_raw_response(status, reason, detail))
            if cycle is not None:
                # The app's receive() returns http.disconnect and its send() is dropped from now on.
                cycle.response_started = cycle.response_complete = cycle.disconnected = True
                cycle.message_event.set()
            self._forget()
            if self._live():
                self.transport.close()

        def _drop(self) -> None:
            self._forget()
            if self.transport is not None and not self.transport.is_closing():
                self.transport.abort()  # nothing is owed to a client that never sent a request

        def _make_room(self) -> bool:
            """Evict the connection that has waited longest on its client, for headers or for a
            body; False when every connection is being served. Oldest of both, not headers
            first: a health probe just accepted (its request not read yet) is the youngest
            waiter, and must not be what a flood of reconnecting dripping bodies evicts."""
            queues = ((guard.waiting, "_waiting"), (guard.receiving, "_receiving"))
            for queue, still in queues:  # drop entries that no longer wait
                while queue and not getattr(next(iter(queue)), still)():
                    queue.popitem(last=False)
            heads = [(next(iter(q.items()))[1], i) for i, (q, _) in enumerate(queues) if q]
            if not heads:
                return False
            _, which = min(heads)
            victim, _ = queues[which][0].popitem(last=False)
            guard.evicted += 1
            victim._drop()
            return True

    GuardedProtocol.__name__ = GuardedProtocol.__qualname__ = f"Guarded{base.__name__}"
    return GuardedProtocol


def _cancel(timer: Optional[asyncio.TimerHandle]) -> None:
    if timer is not None:
        timer.cancel()
    return None
