"""Connections that never finish their request headers are closed, and there are at most so many.

uvicorn's ``timeout_keep_alive`` runs only *after* a response: a client that connects and then
sends nothing, or drips a header a byte at a time, is never timed out (uvicorn 0.54,
``protocols/http/h11_impl.py``: ``data_received`` even cancels the keep-alive timer on every
byte). ``limit_concurrency`` answers 503 to *requests*, so idle sockets that never send one keep
their descriptors until the process hits its limit and ``accept()`` fails with EMFILE (every
other client, health probes included, is then refused). The bearer token cannot help: auth runs
after the headers.

``guarded_protocol`` is uvicorn's h11 protocol with two additions:

- a **header deadline**: a connection waiting for request headers (just accepted, or idle
  between keep-alive requests) is closed ``header_timeout`` seconds after it started waiting,
  however many bytes it dripped meanwhile;
- a **connection cap**: at ``max_connections`` open connections, a new one evicts the oldest
  connection that is waiting for headers (a request being served is never dropped); if every
  connection is busy, the new one is closed at once. A client that sends its request promptly
  (``/healthz``) therefore always gets in, whatever number of silent sockets is held against
  the server.
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from typing import Any, Optional

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

log = logging.getLogger("attnplan.api")

HEADER_TIMEOUT_S = 5.0
MAX_CONNECTIONS = 1000
NOFILE_HEADROOM = 64  # descriptors kept for the listening socket, logs, probes and the artifactory check


class Guard:
    """State shared by one server's connections."""

    def __init__(self, max_connections: int, header_timeout: float):
        if max_connections < 1:
            raise ValueError("max_connections must be at least 1")
        self.max_connections = max_connections
        self.header_timeout = header_timeout
        self.open: set[Any] = set()  # live connections (evicted ones leave at once)
        self.waiting: "OrderedDict[Any, None]" = OrderedDict()  # waiting for headers, oldest first
        self.evicted = 0
        self.refused = 0
        self.timed_out = 0


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


def guarded_protocol(max_connections: int = MAX_CONNECTIONS, header_timeout: float = HEADER_TIMEOUT_S) -> type:
    """A uvicorn ``http`` protocol class (``uvicorn.Config(http=...)``) with its own ``Guard``."""
    guard = Guard(max_connections, header_timeout)

    class GuardedH11Protocol(H11Protocol):
        attnplan_guard = guard

        def __init__(self, *args: Any, **kwargs: Any):
            super().__init__(*args, **kwargs)
            self._header_timer: Optional[asyncio.TimerHandle] = None
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
        def _waiting(self) -> bool:
            """No request in progress, and the next one's headers not complete."""
            if self.transport is None or self.transport.is_closing():
                return False
            return self.conn.their_state is h11.IDLE and (self.cycle is None or self.cycle.response_complete)

        def _track(self) -> None:
            if self._waiting():
                if self not in guard.waiting:
                    guard.waiting[self] = None
                if self._header_timer is None:
                    self._header_timer = self.loop.call_later(guard.header_timeout, self._deadline)
            else:
                guard.waiting.pop(self, None)
                if self._header_timer is not None:
                    self._header_timer.cancel()
                    self._header_timer = None

        def _forget(self) -> None:
            guard.open.discard(self)
            guard.waiting.pop(self, None)
            if self._header_timer is not None:
                self._header_timer.cancel()
                self._header_timer = None

        def _deadline(self) -> None:
            self._header_timer = None
            if self._waiting():
                guard.timed_out += 1
                self._drop()

        def _drop(self) -> None:
            self._forget()
            if self.transport is not None and not self.transport.is_closing():
                self.transport.abort()  # nothing is owed to a client that never sent a request

        def _make_room(self) -> bool:
            """Evict the oldest connection waiting for headers; False when all are busy."""
            while guard.waiting:
                victim, _ = guard.waiting.popitem(last=False)
                if victim._waiting():
                    guard.evicted += 1
                    victim._drop()
                    return True
            return False

    return GuardedH11Protocol
