"""``-q`` / ``-v``: how much a command says on stderr besides its errors.

-1 (``-q``): errors only; 0: errors and notes (what attnplan did not read, what it assumed);
1 (``-v``): also the command's wall time; 2 (``-vv``): also the Python warnings of the libraries
attnplan calls, silenced otherwise: they are not attnplan's output, and the notes say what matters.
"""

from __future__ import annotations

import contextlib
import sys
import time
from typing import Iterator

_level = 0


def set_level(level: int) -> None:
    global _level
    _level = level


def level() -> int:
    return _level


def note(text: str) -> None:
    """``attnplan: note: ...`` on stderr, unless ``-q``."""
    if _level >= 0:
        print(f"attnplan: note: {text}", file=sys.stderr)


@contextlib.contextmanager
def library_warnings() -> Iterator[None]:
    """Python warnings from libraries are hidden below ``-vv``; ``-v`` reports the wall time."""
    import warnings

    t0 = time.perf_counter()
    try:
        if _level >= 2:
            yield
        else:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                yield
    finally:
        if _level >= 1:
            print(f"attnplan: took {time.perf_counter() - t0:.3f} s", file=sys.stderr)
