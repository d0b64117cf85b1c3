"""Progress on a terminal: ``preflight: 412/1000 nodes answered`` redrawn in place on stderr.

Only when stderr is a TTY (a pipe, a file or CI gets nothing, so the report and logs stay clean);
redrawn at most every 0.1 s. ``ProgressSink`` is the dict the HTTP and Ray sources fill as each
node finishes (``sink[i] = outcome``), so counting costs the sources nothing.
"""

from __future__ import annotations

import sys
import time
from typing import Any, Optional, TextIO


class Progress:
    def __init__(self, total: int, stream: Optional[TextIO] = None, *, what: str = "nodes answered",
                 interval: float = 0.1):
        self.stream = stream if stream is not None else sys.stderr
        self.total = total
        self.what = what
        self.interval = interval
        self.done = 0
        self._last = 0.0
        self.enabled = _is_tty(self.stream) and total > 0
        self._drawn = False

    def tick(self, n: int = 1) -> None:
        self.done += n
        if not self.enabled:
            return
        now = time.monotonic()
        if self.done >= self.total or now - self._last >= self.interval:
            self._last = now
            self._draw()

    def _draw(self) -> None:
        width = 24
        filled = width * min(self.done, self.total) // max(self.total, 1)
        bar = "#" * filled + "-" * (width - filled)
        self.stream.write(f"\rpreflight: [{bar}] {self.done}/{self.total} {self.what}")
        self.stream.flush()
        self._drawn = True

    def close(self) -> None:
        """Erase the line (the report follows on stdout)."""
        if self.enabled and self._drawn:
            self.stream.write("\r\033[K")
            self.stream.flush()


class ProgressSink(dict):  # type: ignore[type-arg]
    """``index -> Outcome``, counting each node once as it finishes."""

    def __init__(self, progress: Progress):
        super().__init__()
        self.progress = progress

    def __setitem__(self, key: Any, value: Any) -> None:
        fresh = key not in self
        super().__setitem__(key, value)
        if fresh:
            self.progress.tick()


def _is_tty(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError, OSError):
        return False
