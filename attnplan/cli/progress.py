"""A one-line progress bar for the adapter's warm-up, drawn on stderr only when it is a terminal.

``Executor.warmup(progress=...)`` reports events (attnplan/adapter/warmup.py: ``build-start`` with
the module list, ``build-done``, ``module-loaded``, ``batch-kind-start``/``-done``, ``done``);
``warmup_progress()`` turns them into ``warm-up [#####-----] 4/7 module-loaded fa2:... 12.3s``,
redrawn in place. On a pipe or a log file it returns None: no bar, no carriage returns in logs::

    ex.warmup(progress=warmup_progress())
"""

from __future__ import annotations

import sys
import time
from typing import Callable, Optional, TextIO

BATCH_KINDS = 3  # prefill-only, decode-only, mixed: one exercise step each


class WarmupBar:
    def __init__(self, stream: TextIO, width: int = 24):
        self.stream = stream
        self.width = width
        self.total = BATCH_KINDS
        self.done = 0
        self.t0 = time.monotonic()

    def __call__(self, event: dict) -> None:
        kind = event.get("event")
        if kind == "build-start":
            self.total = len(event.get("modules") or ()) + BATCH_KINDS
        elif kind in ("module-loaded", "batch-kind-done"):
            self.done = min(self.total, self.done + 1)
        what = event.get("module") or event.get("kind") or ""
        filled = int(self.width * self.done / max(1, self.total))
        line = (f"warm-up [{'#' * filled}{'-' * (self.width - filled)}] {self.done}/{self.total} "
                f"{kind} {what} {time.monotonic() - self.t0:.1f}s")
        end = "\n" if kind == "done" else ""
        self.stream.write("\r" + line[:200].ljust(80) + end)
        self.stream.flush()


def warmup_progress(stream: Optional[TextIO] = None) -> Optional[Callable[[dict], None]]:
    """A progress callback for ``Executor.warmup`` when ``stream`` (default stderr) is a TTY, else None."""
    stream = sys.stderr if stream is None else stream
    isatty = getattr(stream, "isatty", None)
    return WarmupBar(stream) if callable(isatty) and isatty() else None
