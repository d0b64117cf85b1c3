"""Writing a command's output to a file the user named (``-o``/``--output``).

A path that cannot be written (a directory such as ``/tmp``, a missing parent directory, no
permission, a full disk) is bad input: one line and exit 2, never an OSError traceback.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import IO, Union

from attnplan.policy import InvalidInputError


def _refuse(path: str, exc: OSError, what: str) -> InvalidInputError:
    if exc.errno == errno.EISDIR or os.path.isdir(path):
        reason = "is a directory; give a file name"
    elif exc.errno == errno.ENOENT:
        reason = f"no such directory: {os.path.dirname(path) or '.'}"
    else:
        reason = (exc.strerror or str(exc)).lower()
    return InvalidInputError(what, f"cannot write {path}: {reason}")


def open_output(path: Union[str, Path], *, what: str = "output") -> IO[str]:
    """``path`` opened for writing text (UTF-8), or ``InvalidInputError`` saying why not."""
    p = str(path)
    if not p:
        raise InvalidInputError(what, "empty file name")
    if os.path.isdir(p):
        raise InvalidInputError(what, f"cannot write {p}: is a directory; give a file name")
    try:
        return open(p, "w", encoding="utf-8")
    except OSError as exc:
        raise _refuse(p, exc, what) from None


def write_output(path: Union[str, Path], text: str, *, what: str = "output") -> None:
    """Write ``text`` to ``path`` (see ``open_output``); a failed write is bad input too."""
    with open_output(path, what=what) as fh:
        try:
            fh.write(text)
            fh.flush()
        except OSError as exc:
            raise _refuse(str(path), exc, what) from None
