"""What the server logs: rate-limited errors, and access lines without query strings.

A flood of failing connections (descriptor exhaustion: asyncio logs "socket.accept() out of
system resource" with a traceback per attempt; malformed requests: uvicorn warns per request)
must not turn into a flood of log lines: past ``burst`` records with the same message in a
``window``, the rest are counted and summarised once the window ends. The access log keeps the
path but never the query string: a token sent as ``?token=`` (refused, but sent) must not end up
in the log.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Callable

RATE_LIMITED_LOGGERS = ("asyncio", "uvicorn.error", "attnplan.api")


class RateLimit(logging.Filter):
    def __init__(self, burst: int = 5, window: float = 10.0, clock: Callable[[], float] = time.monotonic):
        super().__init__()
        self.burst, self.window, self.clock = burst, window, clock
        self._lock = threading.Lock()
        self._seen: dict[str, tuple[float, int]] = {}  # message template -> (window start, count)

    def filter(self, record: logging.LogRecord) -> bool:
        key = f"{record.name}:{record.msg}"
        now = self.clock()
        with self._lock:
            start, count = self._seen.get(key, (now, 0))
            if now - start >= self.window:
                dropped = count - self.burst
                if dropped > 0:
                    record.msg = f"{record.msg} [{dropped} more like this in the last {now - start:.0f}s not logged]"
                start, count = now, 0
            count += 1
            if len(self._seen) > 1024:  # bounded: a stream of distinct messages cannot grow it
                self._seen.clear()
            self._seen[key] = (start, count)
        return count <= self.burst


class RedactQuery(logging.Filter):
    """uvicorn's access record: ``(client, method, path_with_query, http_version, status)``."""

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        if isinstance(args, tuple) and len(args) >= 3 and isinstance(args[2], str) and "?" in args[2]:
            record.args = (*args[:2], redact(args[2]), *args[3:])
        return True


def redact(path: str) -> str:
    base, _, _query = path.partition("?")
    return f"{base}?[redacted]"


def install(logger_names: tuple[str, ...] = RATE_LIMITED_LOGGERS) -> None:
    """Idempotent: each filter once per logger (uvicorn reconfigures logging per server)."""
    for name in logger_names:
        logger = logging.getLogger(name)
        if not any(isinstance(f, RateLimit) for f in logger.filters):
            logger.addFilter(RateLimit())
    access = logging.getLogger("uvicorn.access")
    if not any(isinstance(f, RedactQuery) for f in access.filters):
        access.addFilter(RedactQuery())
