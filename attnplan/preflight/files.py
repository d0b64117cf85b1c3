"""Replacing a file so that no reader ever sees it half-written."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def replace_atomically(target: Path, text: str) -> Path:
    """Write ``text`` to a dotfile beside ``target``, sync it, then rename it over ``target``;
    on any failure the dotfile is removed and ``target`` is left as it was. Only a regular file (or nothing)
    is replaced: a symbolic link, device, FIFO or directory there is refused (safeio.check_replaceable)."""
    from attnplan.safeio import check_replaceable

    check_replaceable(target)
    directory = target.parent if str(target.parent) else Path(".")
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, target)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    return target
